// A small MCP Apps host for the tests (docs/apps.md): the official TypeScript client speaks to
// the bridge, and ext-apps' own host bridge (AppBridge, "./app-bridge") runs the home view in a
// sandboxed iframe (scripts only, an opaque origin) under the CSP the spec builds from the
// resource's _meta.ui.csp. Query: mcp, token, theme (light|dark), tz, width (px).
// What the test looks at is in window.__host.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { AppBridge, PostMessageTransport, getToolUiResourceUri } from "@modelcontextprotocol/ext-apps/app-bridge";

const q = new URL(location.href).searchParams;
const width = Number(q.get("width") ?? 520);
const theme = q.get("theme") ?? "light";
const host = (window.__host = { messages: [], sizes: [], errors: [] });

// SEP-1865 "Content Security Policy Enforcement": the policy built from the declared domains.
function policy(csp = {}) {
  const list = (xs, none) => (xs?.length ? xs.join(" ") : none);
  const res = list(csp.resourceDomains, "");
  return [
    "default-src 'none'",
    `script-src 'self' 'unsafe-inline' ${res}`,
    `style-src 'self' 'unsafe-inline' ${res}`,
    `connect-src ${list(csp.connectDomains, "'none'")}`,
    `img-src 'self' data: ${res}`,
    `font-src 'self' ${res}`,
    `media-src 'self' data: ${res}`,
    `frame-src ${list(csp.frameDomains, "'none'")}`,
    "object-src 'none'",
    `base-uri ${list(csp.baseUriDomains, "'self'")}`,
  ].join("; ");
}

async function main() {
  const client = new Client(
    { name: "ftwbridge-apps-test-host", version: "1.0.0" },
    {
      capabilities: { extensions: { "io.modelcontextprotocol/ui": { mimeTypes: ["text/html;profile=mcp-app"] } } },
      versionNegotiation: { mode: "auto" },
    },
  );
  const headers = { Authorization: `Bearer ${q.get("token")}` };
  await client.connect(new StreamableHTTPClientTransport(new URL(q.get("mcp")), { requestInit: { headers } }));
  const { tools } = await client.listTools();
  host.tools = tools.map((t) => ({ name: t.name, ui: t._meta?.ui ?? null }));
  const uri = getToolUiResourceUri(tools.find((t) => t.name === "status"));
  const read = await client.readResource({ uri });
  const content = read.contents[0];
  host.csp = policy(content._meta?.ui?.csp);
  host.viewBytes = new TextEncoder().encode(content.text).length;

  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.style.cssText = `width:${width}px;height:400px;border:1px solid #8884;display:block`;
  document.body.append(iframe);
  const context = {
    theme,
    locale: "en-GB",
    timeZone: q.get("tz") ?? "UTC",
    displayMode: "inline",
    platform: "web",
    containerDimensions: { width, maxHeight: 4000 },
    styles: { variables: { "--font-sans": "DejaVu Sans, sans-serif" } },
  };
  const bridge = new AppBridge(
    client,
    { name: "ftwbridge-apps-test-host", version: "1.0.0" },
    { serverTools: {}, serverResources: {}, logging: {}, message: { text: {} } },
    { hostContext: context },
  );
  bridge.onmessage = async (params) => { host.messages.push(params); return {}; };
  bridge.onsizechange = ({ height }) => {
    host.sizes.push(height);
    if (height) iframe.style.height = `${height}px`;
  };
  bridge.oninitialized = async () => {
    host.initialized = true;
    await bridge.sendToolInput({ arguments: {} });
    const result = await client.callTool({ name: "status", arguments: {} });
    await bridge.sendToolResult(result);
    host.resultSent = true;
  };
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  const head = `<head><meta http-equiv="Content-Security-Policy" content="${host.csp}">`;
  iframe.srcdoc = content.text.replace("<head>", head);
  host.teardown = async () => {
    await bridge.teardownResource({});
    host.tornDown = true;
  };
  host.remove = async () => { await bridge.close(); iframe.remove(); host.removed = true; };
  host.setTheme = (t) => bridge.setHostContext({ ...context, theme: t });
  host.cancel = (reason) => bridge.sendToolCancelled({ reason });
  host.ready = true;
}

main().catch((e) => { host.errors.push(String(e?.stack ?? e)); });
