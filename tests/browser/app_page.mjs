// A browser-based assistant on its own origin: the official TypeScript client's OAuth flow
// (discovery, registration, PKCE, redirect, code exchange) against the bridge, then `status`.
// Everything the client keeps lives in localStorage, so it survives the redirect round trip.
// The outcome is put in window.__result as JSON.
import { mcp } from "/client.mjs";

const mcpUrl = new URL(location.href).searchParams.get("mcp") ?? localStorage.getItem("mcpUrl");
localStorage.setItem("mcpUrl", mcpUrl);
const redirectUrl = location.origin + "/callback";
const kept = (key) => JSON.parse(localStorage.getItem(key) ?? "null") ?? undefined;
const keep = (key, value) => localStorage.setItem(key, JSON.stringify(value));

const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return {
      client_name: "Browser assistant",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  state: () => "browser-state",
  clientInformation: () => kept("client"),
  saveClientInformation: (info) => keep("client", info),
  tokens: () => kept("tokens"),
  saveTokens: (tokens) => keep("tokens", tokens),
  redirectToAuthorization: (url) => { location.href = url.href; },
  saveCodeVerifier: (verifier) => keep("verifier", verifier),
  codeVerifier: () => kept("verifier"),
  saveAuthorizationServerUrl: (url) => keep("as", url),
  authorizationServerUrl: () => kept("as"),
  saveResourceUrl: (url) => keep("resource", url),
  resourceUrl: () => kept("resource"),
  saveDiscoveryState: (state) => keep("discovery", state),
  discoveryState: () => kept("discovery"),
};

async function main() {
  if (location.pathname !== "/callback") {
    await mcp.auth(provider, { serverUrl: mcpUrl }); // ends by leaving for the consent page
    return;
  }
  const query = new URL(location.href).searchParams;
  await mcp.auth(provider, {
    serverUrl: mcpUrl,
    authorizationCode: query.get("code"),
    iss: query.get("iss") ?? undefined,
  });
  const client = new mcp.Client(
    { name: "browser-assistant", version: "1.0.0" },
    { versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  await client.connect(new mcp.StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider }));
  const status = await client.callTool({ name: "status", arguments: {} });
  return { isError: status.isError ?? false, fields: Object.keys(status.structuredContent?.fields ?? {}) };
}

main().then(
  (outcome) => { if (outcome) window.__result = JSON.stringify({ ok: true, ...outcome }); },
  (error) => { window.__result = JSON.stringify({ ok: false, error: String(error?.stack ?? error) }); },
);
