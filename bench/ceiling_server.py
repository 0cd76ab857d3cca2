"""The stack's own ceiling: a bare quart-trio JSON endpoint doing no MCP work (hypercorn, trio)."""

from __future__ import annotations

import argparse
import json
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, request
from quart_trio import QuartTrio
from sdk_server import LIVE  # type: ignore[import-not-found]

from ftwbridge.lifecycle import until_stdin_closes

app = QuartTrio("ceiling")
ANSWER = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": json.dumps(LIVE)}],
            "structuredContent": LIVE,
            "isError": False,
            "resultType": "complete",
        },
    }
).encode()


@app.route("/mcp", methods=["POST"])
async def mcp() -> Response:
    await request.get_data()
    return Response(ANSWER, 200, {"content-type": "application/json"})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    cfg = Config()
    cfg.bind = [f"127.0.0.1:{args.port}"]
    cfg.accesslog = None
    trio.run(partial(serve, app, cfg, shutdown_trigger=until_stdin_closes))  # lifeline: see run.py


if __name__ == "__main__":
    main()
