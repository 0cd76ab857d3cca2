"""The reference: the official MCP SDK's stateless server (JSON responses) with one in-memory tool.

`python bench/sdk_server.py --port P --stack trio|uvicorn`: a `status` tool returning a dict
shaped like the bridge's `status` result, behind a static bearer-token verifier, served by
hypercorn's trio worker or by uvicorn. Only the SDK's public API is used.
"""

from __future__ import annotations

import argparse
from typing import Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

TOKEN = "bench-token"
LIVE: dict[str, Any] = {
    "uptimeMs": 123456,
    "nowMs": 1796000000000,
    "controlRev": 20787,
    "mode": "planner_arbitrage",
    "fields": {
        "grid_w": 446,
        "pv_w": 2,
        "battery_w": 0,
        "battery_soc": 500,
        "load_w": 448,
        "ev_w": 0,
    },
    "sources": {
        name: {
            "kind": kind,
            "name": label,
            "lastOkMs": 1000,
            "staleAfterMs": 10000,
            "state": "live",
        }
        for name, kind, label in [
            ("meter.p1", "meter", "P1 meter"),
            ("inverter.sungrow", "inverter", "Sungrow inverter"),
            ("battery.pylontech", "battery", "Pylontech battery"),
            ("charger.easee", "charger", "Easee charger"),
        ]
    },
    "dispatchBlockedBy": [],
}


class StaticVerifier:
    """Accepts one fixed token."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != TOKEN:
            return None
        return AccessToken(token=token, client_id="bench", scopes=["ftw.live.read"])


def build(port: int) -> Any:
    url = f"http://127.0.0.1:{port}"
    server = MCPServer(
        name="sdk-reference",
        token_verifier=StaticVerifier(),
        auth=AuthSettings(
            issuer_url=url, resource_server_url=url + "/mcp", validate_token_resource=False
        ),
    )

    @server.tool()
    def status() -> dict[str, Any]:
        """Live power flows of the home (in-memory copy)."""
        return LIVE

    return server.streamable_http_app(stateless_http=True, json_response=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--stack", choices=["trio", "uvicorn"], default="trio")
    args = p.parse_args()
    app = build(args.port)
    if args.stack == "uvicorn":
        import uvicorn

        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
        return
    from functools import partial

    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from ftwbridge.lifecycle import until_stdin_closes

    cfg = Config()
    cfg.bind = [f"127.0.0.1:{args.port}"]
    cfg.accesslog = None
    trio.run(partial(serve, app, cfg, shutdown_trigger=until_stdin_closes))  # lifeline: see run.py


if __name__ == "__main__":
    main()
