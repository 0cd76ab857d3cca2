"""What real MCP clients send at registration, `/authorize` and `/oauth/token` (docs/auth.md, "Clients").

Each row is one client's shape, reduced to what the bridge reads, with the public sources it
was drawn from (the client's own source, docs, or an issue thread that shows its requests). No
personal data: hosts are the vendors' own callbacks, ports the ones their sources show. Where
a source shows only part of a shape, `notes` says which part was assumed, and how.

`tests/oauth/clients/test_clients.py` runs every row through the whole flow against one real
bridge and stub home; docs/auth.md ("clients") lists the same rows with the bridge's answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

READS = "ftw.live.read ftw.plan.read"


@dataclass(frozen=True)
class ClientRow:
    """One client: its registration body (JSON as sent), the redirect URI it authorizes with,
    extra `/authorize` parameters, whether it sends `resource` (RFC 8707), and the sources."""

    name: str
    sources: tuple[str, ...]
    register: dict[str, Any]
    authorize_redirect: str
    authorize_extra: dict[str, str] = field(default_factory=dict)
    sends_resource: bool = True
    notes: str = ""
    kind: str = "https"
    """The redirect's kind as the consent page names it: https, loopback or app."""


ROWS: tuple[ClientRow, ...] = (
    ClientRow(
        name="MCP Inspector",
        sources=(
            "https://github.com/modelcontextprotocol/inspector (client/src/lib/auth.ts, clientMetadata)",
            "https://github.com/curityio/mcp-authorization-secured-api (clients/mcp-inspector/README.md quotes it)",
        ),
        register={
            "redirect_uris": [
                "http://localhost:6274/oauth/callback",
                "http://localhost:6274/oauth/callback/debug",
            ],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "client_name": "MCP Inspector",
            "client_uri": "https://github.com/modelcontextprotocol/inspector",
        },
        authorize_redirect="http://localhost:6274/oauth/callback",
        authorize_extra={"scope": READS},
        kind="loopback",
    ),
    ClientRow(
        name="TypeScript SDK (simpleOAuthClient example)",
        sources=(
            "https://github.com/modelcontextprotocol/typescript-sdk (src/client/auth.ts selectClientAuthMethod; src/examples/client/simpleOAuthClient.ts)",
            "peers/node_modules/@modelcontextprotocol/client/dist/index.cjs (selectClientAuthMethod keeps the registered method the server supports)",
        ),
        register={
            "client_name": "Simple OAuth MCP Client",
            "redirect_uris": ["http://localhost:8090/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post",
        },
        authorize_redirect="http://localhost:8090/callback",
        notes="asks client_secret_post; the bridge answers none, so the SDK sends client_id only",
        kind="loopback",
    ),
    ClientRow(
        name="VS Code",
        sources=(
            "https://github.com/microsoft/vscode (src/vs/base/common/oauth.ts, fetchDynamicRegistration)",
            "https://github.com/koala73/worldmonitor/pull/8305 (cites that source for VS Code's callbacks)",
        ),
        register={
            "client_name": "Visual Studio Code",
            "client_uri": "https://code.visualstudio.com",
            "grant_types": [
                "authorization_code",
                "refresh_token",
                "urn:ietf:params:oauth:grant-type:device_code",
            ],
            "response_types": ["code"],
            "redirect_uris": [
                "https://insiders.vscode.dev/redirect",
                "https://vscode.dev/redirect",
                "http://127.0.0.1/",
                "http://127.0.0.1:33418/",
                "http://localhost/",
                "http://localhost:33418/",
            ],
            "token_endpoint_auth_method": "none",
            "application_type": "native",  # OpenID registration's; unknown here, ignored
        },
        authorize_redirect="http://127.0.0.1:53124/",
        authorize_extra={"scope": ""},
        notes="authorizes from a free loopback port (RFC 8252 section 7.3); port 53124 stands for it",
        kind="loopback",
    ),
    ClientRow(
        name="Cursor",
        sources=(
            "https://github.com/trypostit/trypost/pull/336 (Cursor registers cursor://anysphere.cursor-mcp/oauth/callback)",
            "https://github.com/Altinity/altinity-mcp/issues/169 (Cursor registers as a public client by DCR, PKCE S256)",
        ),
        register={
            "client_name": "Cursor",
            "redirect_uris": ["cursor://anysphere.cursor-mcp/oauth/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        },
        authorize_redirect="cursor://anysphere.cursor-mcp/oauth/callback",
        kind="app",
    ),
    ClientRow(
        name="Claude (web and desktop)",
        sources=(
            "https://github.com/anthropics/claude-ai-mcp/issues/124 (redirect https://claude.ai/api/mcp/auth_callback, scope=claudeai at /authorize)",
            "https://github.com/anthropics/claude-ai-mcp/issues/667 (client_secret_post at the token endpoint)",
            "https://github.com/akutishevsky/withings-mcp/pull/29 (Claude Desktop's connect uses the same claude.ai callback)",
        ),
        register={
            "client_name": "Claude",
            "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post",
        },
        authorize_redirect="https://claude.ai/api/mcp/auth_callback",
        authorize_extra={"scope": "claudeai"},
        notes="scope claudeai names no scope of ours: ignored (RFC 6749 section 3.3), reads asked",
    ),
    ClientRow(
        name="Claude Code",
        sources=(
            "https://github.com/anthropics/claude-code/issues/5826 (loopback callback http://localhost:<port>/callback)",
            "https://github.com/AIDotNet/OpenDeepWiki/pull/343 (Claude Code CLI registers by DCR with an http://localhost redirect)",
        ),
        register={
            "client_name": "Claude Code (ftw)",
            "redirect_uris": ["http://localhost:8080/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        },
        authorize_redirect="http://localhost:8080/callback",
        kind="loopback",
    ),
    ClientRow(
        name="ChatGPT connector",
        sources=(
            "https://github.com/makeplane/plane-mcp-server/pull/165 (https://chatgpt.com/connector_platform_oauth_redirect and /connector/oauth/<id>)",
            "https://github.com/danielealbano/android-remote-control-mcp/pull/166 (ChatGPT registers by DCR and asks offline_access)",
        ),
        register={
            "client_name": "ChatGPT",
            "redirect_uris": [
                "https://chatgpt.com/connector_platform_oauth_redirect",
                "https://chatgpt.com/connector/oauth/abcDEF123456",
            ],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post",
        },
        authorize_redirect="https://chatgpt.com/connector/oauth/abcDEF123456",
        authorize_extra={"scope": "offline_access " + READS},
        sends_resource=False,
        notes="auth method client_secret_post as a web assistant was seen to register; the "
        "connector id abcDEF123456 is made up; sent without resource (RFC 8707 is optional)",
    ),
    ClientRow(
        name="Windsurf",
        sources=(
            "https://github.com/trypostit/trypost/pull/336 (Windsurf among desktop agents registering RFC 8252 private-use callbacks)",
            "public allow-lists of MCP clients' schemes name windsurf:// beside cursor:// and vscode://",
        ),
        register={
            "client_name": "Windsurf",
            "redirect_uris": ["windsurf://codeium.windsurf/oauth/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        },
        authorize_redirect="windsurf://codeium.windsurf/oauth/callback",
        notes="the sources show the scheme only; host and path assumed by analogy with Cursor's",
        kind="app",
    ),
)
"""The table; the official Python SDK's row is driven by the SDK itself (test_clients.py)."""

PYTHON_SDK_SOURCES = (
    "https://github.com/modelcontextprotocol/python-sdk (src/mcp/client/auth/oauth2.py OAuthClientProvider; src/mcp/shared/auth.py OAuthClientMetadata)",
    "examples/clients/simple-auth-client in the same repository (http://localhost:3030/callback, client_secret_post)",
)
