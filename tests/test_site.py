"""`Site.scope_client`: the client's address from an ASGI scope, worked out once per peer and
`X-Forwarded-For` values, and the same answer `client_address` gives."""

from __future__ import annotations

from typing import Any

from ftwbridge.oauth.limits import client_address, trusted_networks
from ftwbridge.site import CLIENT_KEY_BYTES, CLIENTS_KEPT, Site


def _scope(peer: str, *forwarded: bytes) -> dict[str, Any]:
    headers = [(b"host", b"bridge.test")] + [(b"x-forwarded-for", v) for v in forwarded]
    return {"type": "http", "client": (peer, 4000), "headers": headers}


def test_scope_client_answers_as_client_address_before_and_after_the_proxies_change() -> None:
    site = Site("http://bridge.test")
    cases = [
        ("203.0.113.9",),
        ("10.0.0.2", b"198.51.100.7"),
        ("10.0.0.2", b"198.51.100.7, 10.0.0.3", b"192.0.2.1"),
        ("2001:db8::1",),
        ("not an address",),
    ]
    for trusted in ((), trusted_networks(["10.0.0.0/8"])):
        site.trusted_proxies = trusted
        for _round in range(2):  # the second round comes from what the first kept
            for peer, *fwd in cases:
                want = client_address(peer, [v.decode() for v in fwd], trusted)
                assert site.scope_client(_scope(peer, *fwd)) == want
    assert site.scope_client({"type": "http", "headers": []}) == "unknown"


def test_scope_client_answers_right_past_the_answers_it_keeps() -> None:
    site = Site("http://bridge.test")
    for i in range(CLIENTS_KEPT + 10):
        peer = f"198.51.{i // 256}.{i % 256}"
        assert site.scope_client(_scope(peer)) == peer


def test_scope_client_keeps_no_long_forwarded_values() -> None:
    site = Site("http://bridge.test", trusted_proxies=trusted_networks(["10.0.0.0/8"]))
    long = b", ".join(b"10.0.%d.%d" % (i // 256, i % 256) for i in range(40)) + b", 192.0.2.5"
    assert len(long) > CLIENT_KEY_BYTES
    for _round in range(2):
        assert site.scope_client(_scope("10.0.0.2", long)) == "192.0.2.5"
    assert site._clients == {}  # a large header is worked out, never held
    assert site.scope_client(_scope("10.0.0.2", b"192.0.2.6")) == "192.0.2.6"
    assert len(site._clients) == 1
