"""Redirect URIs (docs/auth.md, "Redirect URIs"; RFC 8252 sections 7.1 and 7.3, OAuth 2.1 section 2.3.1):
which are accepted, of what kind, how they match, and what CSP source each one gets."""

from __future__ import annotations

import pytest

from ftwbridge.oauth.redirects import (
    RedirectRefused,
    form_action_source,
    redirect_kind,
    redirect_label,
    redirect_matches,
)

ACCEPTED = [
    ("http://127.0.0.1/callback", "loopback"),
    ("http://127.0.0.1:53124/callback", "loopback"),
    ("http://[::1]:8080/cb", "loopback"),
    ("http://localhost:6274/oauth/callback", "loopback"),
    ("https://claude.ai/api/mcp/auth_callback", "https"),
    ("https://chatgpt.com/connector_platform_oauth_redirect", "https"),
    ("cursor://anysphere.cursor-mcp/oauth/callback", "app"),
    ("vscode://vscode.github-authentication/did-authenticate", "app"),
    ("com.example.app:/oauth2redirect", "app"),
    ("com.example.app:/cb?x=1", "app"),
]

REFUSED = [
    ("", "non-empty"),
    (None, "non-empty"),
    (["http://127.0.0.1/cb"], "non-empty"),
    ("http://evil.example/cb", "only to 127.0.0.1"),
    ("http://127.0.0.1.evil.example/cb", "only to 127.0.0.1"),
    ("javascript:alert(1)//", "not a native app's"),
    ("data:text/html,<script>", "URI characters"),
    ("data:text/html,x", "not a native app's"),
    ("file:///etc/passwd", "not a native app's"),
    ("wss://x.example/cb", "not a native app's"),
    ("https://x.example/cb#frag", "fragment"),
    ("https://claude.ai@evil.example/cb", "user info"),
    ("https://evil.example;frame-ancestors */cb", "plain lowercase name"),
    ("https://x.example/cb\r\nSet-Cookie: x=1", "URI characters"),
    ("https://x.example/a b", "URI characters"),
    ("http://127.0.0.1:99999/cb", "valid port"),
    ("HTTPS://x.example/cb", "lowercase scheme"),
    ("Cursor://x/cb", "lowercase scheme"),
    ("https:///cb", "needs a host"),
    ("com.example.app://ex\u202eample/cb", "plain lowercase name"),
    ("https://x.example/" + "a" * 600, "longer than"),
]


@pytest.mark.parametrize(("uri", "kind"), ACCEPTED)
def test_accepted_kinds(uri: str, kind: str) -> None:
    assert redirect_kind(uri) == kind


@pytest.mark.parametrize(("uri", "reason"), REFUSED)
def test_refused_with_the_reason(uri: object, reason: str) -> None:
    with pytest.raises(RedirectRefused, match=reason):
        redirect_kind(uri)


def test_loopback_ports_vary_everything_else_matches_exactly() -> None:
    reg = "http://127.0.0.1/callback"
    assert redirect_matches(reg, "http://127.0.0.1:53124/callback")
    assert redirect_matches("http://127.0.0.1:9/callback", "http://127.0.0.1:53124/callback")
    assert redirect_matches("http://[::1]/cb", "http://[::1]:5000/cb")
    assert redirect_matches("http://localhost/cb", "http://localhost:5000/cb")
    for other in (
        "http://127.0.0.1:53124/callback/",  # trailing slash
        "http://127.0.0.1:53124/other",  # path
        "http://127.0.0.1:53124/callback?x=1",  # query
        "http://localhost:53124/callback",  # another loopback host
        "http://[::1]:53124/callback",
        "https://127.0.0.1:53124/callback",  # scheme
        "http://127.0.0.1:99999/callback",  # not a port
        "http://127.0.0.1:53124/callback#x",
    ):
        assert not redirect_matches(reg, other), other
    https = "https://claude.ai/api/mcp/auth_callback"
    assert not redirect_matches(https, "https://claude.ai:8443/api/mcp/auth_callback")
    assert not redirect_matches(https, https + "/")
    app = "cursor://anysphere.cursor-mcp/oauth/callback"
    assert redirect_matches(app, app)
    assert not redirect_matches(app, "cursor://anysphere.cursor-mcp:1/oauth/callback")
    assert not redirect_matches(app, "cursor://evil/oauth/callback")


def test_form_action_sources_and_labels() -> None:
    assert form_action_source("http://127.0.0.1/cb") == "http://127.0.0.1:*"
    assert form_action_source("http://[::1]:80/cb") == "http://[::1]:*"
    assert form_action_source("cursor://anysphere.cursor-mcp/cb") == "cursor:"
    assert form_action_source("com.example.app:/cb") == "com.example.app:"
    assert form_action_source("https://claude.ai/cb") == "https://claude.ai"
    assert redirect_label("cursor://anysphere.cursor-mcp/cb") == (
        "app",
        "cursor (anysphere.cursor-mcp)",
    )
    assert redirect_label("com.example.app:/cb") == ("app", "com.example.app")
    assert redirect_label("http://127.0.0.1:5/cb") == ("loopback", "127.0.0.1")
