// Bundle host.mjs (the official client and ext-apps' AppBridge) into one browser module, so the
// test host page works offline. rolldown is already in peers/node_modules (vite's bundler).
// Usage: node bundle.mjs PEERS_DIR OUT_FILE
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const [peers, out] = process.argv.slice(2);
const require = createRequire(join(peers, "package.json"));
const { build } = await import(pathToFileURL(require.resolve("rolldown")).href);
await build({
  input: join(dirname(fileURLToPath(import.meta.url)), "host.mjs"),
  platform: "browser",
  logLevel: "warn",
  resolve: { modules: [join(peers, "node_modules")], conditionNames: ["browser", "import", "default"] },
  output: { file: out, format: "esm", codeSplitting: false },
});
