"""Redirect URIs as RFC 8252 (OAuth for native apps) and OAuth 2.1 want them.

Three kinds are accepted, each with its own matching rule:

- `loopback`: `http` to `127.0.0.1`, `[::1]` or `localhost`; the port may vary between the
  registration and the authorization request (RFC 8252 section 7.3: native apps take a free port
  each time). Scheme, host, path and query must still match exactly. `localhost` is accepted
  although RFC 8252 section 8.3 prefers the IP literals, because MCP Inspector and several
  command-line assistants register it (docs/auth.md, "clients").
- `app`: a private-use URI scheme (RFC 8252 section 7.1), such as `com.example.app:/cb` or
  `cursor://anysphere.cursor-mcp/oauth/callback`; matched exactly. Schemes a browser runs or
  treats as a document (`javascript`, `data`, `file`, ...) and the web's own schemes are refused.
- `https`: matched exactly (OAuth 2.1 section 2.3.1).

Everything else is refused, with the reason.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

MAX_URI_CHARS = 512
LOOPBACK_IPS = frozenset({"127.0.0.1", "::1"})
LOOPBACK_HOSTS = LOOPBACK_IPS | {"localhost"}
REFUSED_SCHEMES = frozenset(
    {
        "about", "blob", "chrome", "data", "file", "filesystem", "ftp", "http", "intent",
        "javascript", "jar", "mailto", "sms", "tel", "urn", "vbscript", "view-source", "ws",
        "wss", "xmpp",
    }
)  # fmt: skip
"""Schemes that are not a native app's: run by the browser, documents, or the web's own."""

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,63}")
_HOST = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|\[[0-9a-f:.]{2,45}\]")
_PATH = re.compile(r"[A-Za-z0-9\-._~%!$&'()*+,;=:@/?]*")


class RedirectRefused(ValueError):
    """A redirect URI this server does not accept; the message says why, in one sentence."""


def redirect_kind(uri: Any) -> str:
    """`"loopback"`, `"app"` or `"https"` for an acceptable redirect URI (module docstring).

    Raises:
        RedirectRefused: with the reason (not text, too long, fragment, user info, bad host or
            port, characters outside a URI's, a scheme that is not an app's, http off loopback).
    """
    if not isinstance(uri, str) or not uri:
        raise RedirectRefused("a redirect URI must be a non-empty string")
    if len(uri) > MAX_URI_CHARS:
        raise RedirectRefused(f"a redirect URI is longer than {MAX_URI_CHARS} characters")
    if "#" in uri:
        raise RedirectRefused("a redirect URI must not have a fragment (RFC 6749 section 3.1.2)")
    parts = urlsplit(uri)
    scheme = parts.scheme
    if not _SCHEME.fullmatch(scheme) or not uri.startswith(scheme + ":"):
        raise RedirectRefused("a redirect URI needs a lowercase scheme")
    if "@" in parts.netloc:
        raise RedirectRefused("a redirect URI must not carry user info (it hides the real host)")
    if not _PATH.fullmatch(parts.path + ("?" + parts.query if parts.query else "")):
        raise RedirectRefused("a redirect URI's path and query must use URI characters only")
    if parts.netloc:
        host = parts.netloc.rsplit(":", 1)[0] if not parts.netloc.endswith("]") else parts.netloc
        try:
            port = parts.port
        except ValueError:
            raise RedirectRefused("a redirect URI's port is not a valid port") from None
        if not _HOST.fullmatch(host.lower()) or (port is not None and not 0 < port < 65536):
            raise RedirectRefused("a redirect URI's host must be a plain lowercase name or IP")
    hostname = parts.hostname or ""
    if scheme == "https":
        if not parts.netloc:
            raise RedirectRefused("an https redirect URI needs a host")
        return "https"
    if scheme == "http":
        if hostname in LOOPBACK_HOSTS:
            return "loopback"
        raise RedirectRefused(
            "http redirect URIs are allowed only to 127.0.0.1, [::1] or localhost"
        )
    if scheme in REFUSED_SCHEMES:
        raise RedirectRefused(f"the scheme {scheme}: is not a native app's private-use scheme")
    return "app"


def valid_redirect(uri: Any) -> bool:
    """Whether `redirect_kind` accepts `uri`."""
    try:
        redirect_kind(uri)
    except RedirectRefused:
        return False
    return True


def _without_port(uri: str) -> tuple[str, str, str, str]:
    parts = urlsplit(uri)
    return parts.scheme, parts.hostname or "", parts.path, parts.query


def redirect_matches(registered: str, asked: str) -> bool:
    """Whether `asked` (at `/authorize` or `/oauth/token`) matches the `registered` URI: a
    loopback one with any port (RFC 8252 section 7.3), every other kind exactly (OAuth 2.1
    section 2.3.1). `registered` was accepted by `redirect_kind`; `asked` need not be."""
    if asked == registered:
        return True
    if redirect_kind(registered) != "loopback" or not valid_redirect(asked):
        return False
    return redirect_kind(asked) == "loopback" and _without_port(asked) == _without_port(registered)


def matching_redirect(registered: list[str], asked: str) -> str | None:
    """`asked` when it matches one of `registered` (`redirect_matches`), else None."""
    return asked if any(redirect_matches(r, asked) for r in registered) else None


def form_action_source(uri: str) -> str:
    """The CSP source (CSP Level 3 `form-action`) that lets a form's redirect chain end at
    `uri`: a loopback URI's scheme, host and any port; a private-use scheme's `scheme:`; an https
    URI's origin. `uri` was accepted by `redirect_kind` (no spaces, quotes or semicolons)."""
    kind = redirect_kind(uri)
    parts = urlsplit(uri)
    if kind == "app":
        return parts.scheme + ":"
    if kind == "loopback":
        host = parts.netloc.rsplit(":", 1)[0] if not parts.netloc.endswith("]") else parts.netloc
        return f"http://{host}:*"
    return f"{parts.scheme}://{parts.netloc}"


def redirect_label(uri: str) -> tuple[str, str]:
    """(kind, name) to show a person where the browser returns: for an app, its scheme (the
    app's name as the device knows it) with its host if any; else the host name."""
    kind = redirect_kind(uri)
    parts = urlsplit(uri)
    if kind == "app":
        return kind, parts.scheme + (f" ({parts.hostname})" if parts.hostname else "")
    return kind, parts.hostname or ""
