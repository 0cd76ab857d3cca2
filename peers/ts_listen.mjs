// The TypeScript client's subscriptions/listen against ftwbridge: opens a stream for one
// resource URI, waits for its first notifications/resources/updated, closes the stream, and
// prints one JSON line of what it saw.
// Usage: node ts_listen.mjs URL TOKEN URI   (@modelcontextprotocol/client 2.4, pinned 2026-07-28)
const [url, token, uri] = process.argv.slice(2);
const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
const client = new Client(
  { name: "ftwbridge-listen", version: "1.0.0" },
  { versionNegotiation: { mode: { pin: "2026-07-28" } } },
);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const updates = [];
let gotOne;
const one = new Promise((resolve) => { gotOne = resolve; });
client.setNotificationHandler("notifications/resources/updated", async (n) => {
  updates.push({ uri: n.params.uri, meta: n.params._meta ?? null });
  gotOne();
});
const sub = await client.listen({ resourceSubscriptions: [uri] });
await one;
await sub.close();
console.log(JSON.stringify({ honored: sub.honoredFilter, updates }));
await client.close();
