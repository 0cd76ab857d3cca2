// The TypeScript MCP client (v2, 2026-07-28 pinned, or legacy) commanding through ftwbridge:
// starts a charge, reads the chargers, stops it, and prints one JSON line of what it saw.
// It declares no elicitation, so the bridge first answers a preview; the person says yes and
// the charge is called again with its confirmation (docs/control.md).
// Usage: node ts_control.mjs pin|legacy URL TOKEN
const [mode, url, token] = process.argv.slice(2);
const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
const versionNegotiation = mode === "pin" ? { mode: { pin: "2026-07-28" } } : { mode };
const client = new Client({ name: "ftwbridge-control", version: "1.0.0" }, { versionNegotiation });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
const args = { charger: "lp1", power_w: 7400, minutes: 5 };
let charge = await client.callTool({ name: "ev_charge_now", arguments: args });
const preview = charge.structuredContent?.state === "awaiting_confirmation" ? charge.structuredContent : null;
if (preview) {  // the person reads preview.question and says yes
  charge = await client.callTool({ name: "ev_charge_now", arguments: { ...args, confirmation: preview.confirmation } });
}
const chargers = await client.callTool({ name: "chargers_list", arguments: {} });
const stop = await client.callTool({ name: "ev_stop", arguments: { charger: "lp1" } });
const again = await client.callTool({ name: "ev_stop", arguments: { charger: "lp1" } });
console.log(JSON.stringify({
  mode,
  question: preview?.question ?? null,
  charge: { isError: charge.isError ?? false, state: charge.structuredContent?.state ?? null, observed: charge.structuredContent?.observed ?? null },
  hold: chargers.structuredContent?.loadpoints?.[0]?.hold ?? null,
  stop: { isError: stop.isError ?? false, state: stop.structuredContent?.state ?? null },
  again: { isError: again.isError ?? false, text: again.content?.[0]?.text ?? null },
}));
await client.close();
