// The TypeScript reference of `make bench`: the official TypeScript SDK's stateless server
// (@modelcontextprotocol/server 2.x, createMcpHandler with JSON responses) on Node's http through
// @modelcontextprotocol/node's toNodeHandler, answering one in-memory `status` tool the way
// bench/sdk_server.py does (the same dict as structured content and as indented JSON text, an
// object output schema, a static bearer token). Only the SDK's public API is used.
// Usage: node bench/ts_server.mjs PORT LIVE_JSON
//   PORT: the loopback port to listen on; LIVE_JSON: the tool's result, as JSON text.
// It stops when its standard input closes (the bench's lifeline), or on SIGTERM.
// The packages are the ones pinned in peers/package.json (`make peers`); this file lives in
// bench/ with the other servers of the bench, so it loads them from peers/node_modules by each
// package's own ESM entry (its package.json "exports"), as an import from peers/ would.
import { readFile } from "node:fs/promises";
import http from "node:http";

if (process.argv.length !== 4 || process.argv.includes("--help") || process.argv.includes("-h")) {
  console.log("usage: node bench/ts_server.mjs PORT LIVE_JSON\n" +
    "The official TypeScript SDK's stateless MCP server with one in-memory status tool, for make bench.");
  process.exit(process.argv.includes("--help") || process.argv.includes("-h") ? 0 : 2);
}

const PEERS = new URL("../peers/node_modules/", import.meta.url);

async function load(name) {
  const dir = new URL(`${name}/`, PEERS);
  const entry = JSON.parse(await readFile(new URL("package.json", dir), "utf8")).exports["."];
  return import(new URL(entry.import.default ?? entry.import, dir).href);
}

const { McpServer, createMcpHandler } = await load("@modelcontextprotocol/server");
const { toNodeHandler } = await load("@modelcontextprotocol/node");
const { z } = await load("zod");

const [port, liveJson] = process.argv.slice(2);
const live = JSON.parse(liveJson);
const TOKEN = "bench-token";
const authInfo = { token: TOKEN, clientId: "bench", scopes: ["ftw.live.read"] };

function factory() {
  const server = new McpServer({ name: "sdk-reference-ts", version: "" });
  server.registerTool(
    "status",
    {
      description: "Live power flows of the home (in-memory copy).",
      outputSchema: z.record(z.string(), z.unknown()),
    },
    async () => ({
      content: [{ type: "text", text: JSON.stringify(live, null, 2) }],
      structuredContent: live,
    }),
  );
  return server;
}

const mcp = toNodeHandler(createMcpHandler(factory, { responseMode: "json" }));
const server = http.createServer((req, res) => {
  if (req.url !== "/mcp") {
    res.writeHead(404).end();
    return;
  }
  if (req.headers.authorization !== `Bearer ${TOKEN}`) {
    res.writeHead(401, { "WWW-Authenticate": 'Bearer error="invalid_token"' }).end();
    return;
  }
  req.auth = authInfo;
  mcp(req, res);
});
server.keepAliveTimeout = 60_000;
server.listen(Number(port), "127.0.0.1");

const stop = () => process.exit(0);
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.resume();
process.on("SIGTERM", stop);
