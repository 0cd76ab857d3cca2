// Bundle the official TypeScript MCP client (@modelcontextprotocol/client, in peers/) for a
// browser page, with rolldown (already in peers/node_modules as vite's bundler).
// Usage: node bundle_client.mjs PEERS_DIR OUT_FILE
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [peers, out] = process.argv.slice(2);
const require = createRequire(join(peers, "package.json"));
const { build } = await import(pathToFileURL(require.resolve("rolldown")).href);
const entry = join(tmpdir(), `mcp-client-entry-${process.pid}.mjs`);
writeFileSync(entry, 'export * as mcp from "@modelcontextprotocol/client";\n');
await build({
  input: entry,
  platform: "browser",
  logLevel: "warn",
  resolve: { modules: [join(peers, "node_modules")], conditionNames: ["browser", "import", "default"] },
  output: { file: out, format: "esm", codeSplitting: false },
});
