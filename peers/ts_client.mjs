// A real TypeScript MCP client against ftwbridge: lists the tools, calls status, history_query
// and a tool the stub box refuses, and prints one JSON line of what it saw.
// Usage: node ts_client.mjs v2|v1 MODE URL TOKEN
//   v2 (@modelcontextprotocol/client 2.4): MODE pin | auto | legacy
//   v1 (@modelcontextprotocol/sdk 1.32):  MODE 2025-11-25 | 2025-06-18 | 2025-03-26
const [sdk, mode, url, token] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${token}` };
let client;
let transport;
if (sdk === "v2") {
  const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
  const versionNegotiation = mode === "pin" ? { mode: { pin: "2026-07-28" } } : { mode };
  client = new Client({ name: "ftwbridge-peer", version: "1.0.0" }, { versionNegotiation });
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
} else {
  const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
  client = new Client({ name: "ftwbridge-peer-v1", version: "1.0.0" });
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  // The 1.x client always asks for its latest revision; offer the older one MODE names.
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message.method === "initialize") message.params.protocolVersion = mode;
    return send(message, options);
  };
}
await client.connect(transport);
const tools = await client.listTools();
const status = await client.callTool({ name: "status", arguments: {} });
const history = await client.callTool({ name: "history_query", arguments: { range: "6h", series: ["pv_w"], points: 10 } });
const refused = await client.callTool({ name: "diag_run", arguments: { check: "driver", src: "no-such-driver" } });
const version = transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.() ?? null;
console.log(JSON.stringify({
  sdk, mode, version,
  tools: tools.tools.map((t) => t.name).sort(),
  readOnly: tools.tools.filter((t) => t.annotations?.readOnlyHint === true).map((t) => t.name).sort(),
  status: { isError: status.isError ?? false, grid: status.structuredContent?.fields?.grid_w ?? null },
  history: { isError: history.isError ?? false, points: history.structuredContent?.series?.pv_w?.length ?? null },
  refused: { isError: refused.isError ?? false, text: refused.content?.[0]?.text ?? null },
}));
await client.close();
