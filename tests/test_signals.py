"""`ftwbridge serve` and SIGHUP (docs/operations.md, "Signals"): by default SIGHUP ended the
process at once without a word; now it is logged, nothing is reloaded, and the bridge serves
on until SIGTERM, which still drains and exits 0."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

from tests.test_cli import BOUND_S, _free_port, _serve, _stop


def test_sighup_is_logged_and_the_bridge_serves_on(tmp_path: Path) -> None:
    port = _free_port()
    proc, banner = _serve(tmp_path, f'bind = "127.0.0.1:{port}"\n')
    try:
        assert banner.startswith("ftwbridge serving")
        proc.send_signal(signal.SIGHUP)
        meta_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
        with urllib.request.urlopen(meta_url, timeout=BOUND_S) as answer:
            assert json.load(answer)["resource"].endswith("/mcp")
        assert proc.poll() is None
    finally:
        err = _stop(proc)  # SIGTERM: drains, exits 0
    assert err.count("SIGHUP ignored: settings are read only at start") == 1
