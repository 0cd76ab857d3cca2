"""The consent pages: server-rendered HTML, every value escaped, no script, strict headers."""

from __future__ import annotations

from html import escape

from ftwbridge.proto.clean import clean
from ftwbridge.proto.names import Cap, Scope
from ftwbridge.proto.registry import CAPS, SCOPE_DESC

from .model import Pending
from .redirects import form_action_source, redirect_label

MAX_SHOWN_CHARS = 80
PAGE_HEADERS = {
    "content-type": "text/html; charset=utf-8",
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no-referrer makes Chromium post Origin: null
    "cache-control": "no-store",
}
_STYLE = "body{font:16px system-ui,sans-serif;max-width:34em;margin:3em auto;padding:0 1em}code{font-size:110%}"


def headers_for(p: Pending) -> dict[str, str]:
    """The page headers for a consent request: a form's redirect chain may end at the client's
    registered redirect URI, so CSP `form-action` names that origin too (Chromium enforces it
    on redirects after a form post)."""
    source = form_action_source(p.redirect_uri)  # validated: no spaces, quotes or semicolons
    csp = PAGE_HEADERS["content-security-policy"].replace(
        "form-action 'self'", f"form-action 'self' {source}"
    )
    return PAGE_HEADERS | {"content-security-policy": csp}


def shown(text: str) -> str:
    """Untrusted text for a page: hidden characters removed, cut, then HTML-escaped."""
    cleaned = clean(text).replace("\n", " ")
    if len(cleaned) > MAX_SHOWN_CHARS:
        cleaned = cleaned[: MAX_SHOWN_CHARS - 1] + "…"
    return escape(cleaned, quote=True)


def _page(title: str, body: str, refresh_s: int | None = None) -> bytes:
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>{meta}<style>{_STYLE}</style></head><body>{body}</body></html>"
    ).encode()


def consent(p: Pending, error: str | None = None) -> bytes:
    """Who asks, for what, and the box where the owner approves: type the home's claim code."""
    kind, name = redirect_label(p.redirect_uri)
    if kind == "app":
        where = (
            f"returns to the app <code>{shown(name)}</code>, an app on your device, not a website"
        )
    elif kind == "loopback":
        where = f"returns to a program on your device, <code>{shown(name)}</code>"
    else:
        where = f"returns to <code>{shown(name)}</code>"
    reads = [s for s in p.scopes if s not in CHANGE_WORDS]
    scopes = "".join(f"<li>{escape(SCOPE_DESC.get(Scope(s), s))}</li>" for s in reads)
    problem = f'<p role="alert"><strong>{shown(error)}</strong></p>' if error else ""
    body = (
        f"<h1>Connect an assistant to your home</h1>"
        f"<p><strong>{shown(p.client_name)}</strong> ({where}) asks to read:</p><ul>{scopes}</ul>"
        f"{_changes(p.scopes)}{problem}<p>Open your home box's app, choose <em>connect an assistant</em>, and type the code it shows. "
        f"You will then approve at home.</p>"
        f'<form method="post" action="/authorize"><input type="hidden" name="req" value="{escape(p.id)}">'
        f'<input type="hidden" name="csrf" value="{escape(p.csrf)}">'
        f'<label>Code from your home <input name="code" autocomplete="off" maxlength="12" placeholder="XXXX-XXXX" required></label> '
        f"<button>Ask my home</button></form>"
    )
    return _page("Connect an assistant", body)


CHANGE_WORDS = {
    Scope.FTW_DISPATCH_WRITE.value: "start and stop charging for up to {minutes} minutes at a time",
    Scope.FTW_GOALS_WRITE.value: "ask you for lasting changes, such as a car's charge target or the"
    " site's mode, which you approve or deny at home",
}
"""What each control scope lets an assistant change, in the owner's words (PROTOCOL.md part E)."""


def _changes(scopes: tuple[str, ...]) -> str:
    """The consent page's list of what the assistant could change, apart from what it could
    read (issue 16 item 5), and that the owner may approve reading only."""
    minutes = CAPS[Cap.HOLD_S].default // 60
    items = [CHANGE_WORDS[s].format(minutes=minutes) for s in scopes if s in CHANGE_WORDS]
    if not items:
        return ""
    listed = "".join(f"<li>{escape(i.capitalize())}</li>" for i in items)
    return (
        f"<p>and to change, within the limits you set at home:</p><ul>{listed}</ul>"
        "<p>At home you can approve reading only; then it can change nothing.</p>"
    )


def waiting(p: Pending) -> bytes:
    """The page that follows the request (it reloads itself every 2 s)."""
    body = f"<h1>Waiting for your home</h1><p>Approve <strong>{shown(p.client_name)}</strong> on your home box or its app. This page moves on by itself.</p>"
    return _page("Waiting for your home", body, refresh_s=2)


def problem(message: str, refresh_s: int | None = None) -> bytes:
    """A page for errors that must not go back to the client's redirect URI; with
    `refresh_s`, it reloads itself after that many seconds (a passing fault)."""
    return _page(
        "Cannot connect",
        f"<h1>Cannot connect the assistant</h1><p>{shown(message)}</p>",
        refresh_s,
    )
