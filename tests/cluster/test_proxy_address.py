"""`make cluster`'s HAProxy names the client, and its instances believe it: every limit keyed
on an address sees the client's, not HAProxy's (docs/operations.md, "Limits that strangers
cannot fill")."""

from __future__ import annotations

from pathlib import Path

from cluster.rig import instance_settings
from cluster.services import Instance, write_haproxy
from ftwbridge.config import load_config


def test_haproxy_forwards_the_client_address_and_instances_trust_it(tmp_path: Path) -> None:
    settings = instance_settings(
        tmp_path,
        "b-1",
        (8780, 8781, 8782),
        "http://127.0.0.1:8700",
        "postgresql://x",
        {"mesh_key": "00" * 32},
    )
    assert settings["trusted_proxies"] == ["127.0.0.1"]
    instance = Instance("b-1", tmp_path, 8780, 8781, 8782, settings)
    text = write_haproxy(tmp_path, 8700, [instance]).read_text()
    assert "option forwardfor" in text
    instance.write_config()
    assert 'trusted_proxies = ["127.0.0.1"]' in instance.config_path.read_text()
    assert load_config(instance.config_path, env={}).trusted_proxies == ("127.0.0.1",)
