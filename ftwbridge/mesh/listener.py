"""The internal listener's Quart app, behind `mesh/streams.StreamingRoute`, which answers
every forwarded `/mcp` request: this app carries the relayed door messages' route
(`relay.add_relay_route`) and answers anything else with 404.
"""

from __future__ import annotations

from quart_trio import QuartTrio


def create_internal_app(*, max_body_bytes: int, body_timeout_s: float) -> QuartTrio:
    """The internal listener's app, with the body's bounds of the main listener (bytes,
    seconds: 413 and 408 past them); the node adds the relay route to it."""
    app = QuartTrio("ftwbridge-internal")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    app.config["BODY_TIMEOUT"] = body_timeout_s
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    return app
