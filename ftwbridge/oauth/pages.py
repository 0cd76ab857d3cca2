"""The consent pages: server-rendered HTML, every value escaped, no script, strict headers."""

from __future__ import annotations

from html import escape

from ftwbridge.proto.clean import clean
from ftwbridge.proto.names import Cap, Scope
from ftwbridge.proto.registry import CAPS, SCOPE_DESC

from .model import GRANT_TTL_MS, REFRESH_TTL_MS, Pending
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
_STYLE = (
    ":root{color-scheme:light dark;--fg:#1f2328;--bg:#fff;--muted:#59636e;--accent:#0969da;--bad:#cf222e}"
    "@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--muted:#9198a1;--accent:#4493f8;--bad:#ff7b72}}"
    "body{font:17px/1.5 system-ui,sans-serif;color:var(--fg);background:var(--bg);max-width:34em;"
    "margin:1.5em auto;padding:0 1em;overflow-wrap:anywhere}"
    "h1{font-size:1.5em;line-height:1.25}code{font-size:100%}small,.muted{color:var(--muted)}"
    "label{display:block;font-weight:600;margin:1em 0 .3em}"
    "input[name=code]{box-sizing:border-box;width:100%;max-width:16em;min-height:48px;font:inherit;"
    "font-size:1.25em;letter-spacing:.1em;text-transform:uppercase;padding:.3em .5em;"
    "border:2px solid var(--muted);border-radius:8px;background:var(--bg);color:var(--fg)}"
    "input[aria-invalid=true]{border-color:var(--bad)}"
    ".error{color:var(--bad);font-weight:600;margin:0 0 .3em}"
    ".summary{border:3px solid var(--bad);border-radius:8px;padding:.6em .8em;margin:1em 0}"
    ".summary a{color:var(--bad);display:inline-block;padding:.55em 0;font-weight:600}"
    ".actions{display:flex;flex-wrap:wrap;gap:12px;margin-top:1.2em}"
    "button{min-height:48px;min-width:44px;padding:0 1.2em;font:inherit;font-weight:600;"
    "border-radius:8px;border:2px solid var(--accent);cursor:pointer}"
    "button.yes{background:var(--accent);color:#fff}"
    "button.no{background:transparent;color:var(--fg);border-color:var(--muted)}"
)
"""Laid out for a phone first: the viewport tag (`_page`) makes 360 px wide screens render at
their own width, text is 17 px, the code field and both buttons at least 48 px tall (WCAG 2.5.5
asks 44 px), and the colours follow the device's light or dark setting."""


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
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>{meta}<style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>"
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
    summary = (
        '<div class="summary" role="alert"><strong>That did not work:</strong>'
        f' <a href="#code">{shown(_sentence(error))}</a></div>'
        if error
        else ""
    )
    body = (
        f"<h1>Connect an assistant to your home</h1>{summary}"
        f"<p><strong>{shown(p.client_name)}</strong> ({where}) asks to read:</p><ul>{scopes}</ul>"
        f"{_changes(p.scopes)}<p>{LASTS}</p>"
        "<p>Open your home box's app, choose <em>connect an assistant</em>, and type the code it"
        " shows. You will then approve at home, where you see which home it is.</p>"
        f'<form method="post" action="/authorize"><input type="hidden" name="req" value="{escape(p.id)}">'
        f'<input type="hidden" name="csrf" value="{escape(p.csrf)}">'
        f"{_code_field(error)}"
        '<div class="actions"><button class="yes" name="decision" value="allow">Ask my home</button>'
        '<button class="no" name="decision" value="deny" formnovalidate>Don\'t allow</button></div>'
        "</form>"
    )
    return _page("Connect an assistant", body)


LASTS = (
    "If your home approves, the assistant keeps this access for as long as you choose there"
    f" ({GRANT_TTL_MS // 86_400_000} days unless you pick another time), and you can remove it at"
    f" home at any moment; unused for {REFRESH_TTL_MS // 86_400_000} days, it must sign in again."
)
"""How long the access lasts, as the consent page says it: the owner sets the grant's end at
home (the box's default is `GRANT_TTL_MS`), and a refresh token unused for `REFRESH_TTL_MS`
ends the sign-in."""


def _sentence(text: str) -> str:
    """`text` as a sentence a person reads: a capital first letter and a full stop."""
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def _code_field(error: str | None) -> str:
    """The claim-code field, with a wrong code's words right above it (between its label and
    the field, so both are on screen when the focused field is scrolled into view), tied to it
    for screen readers, and the field focused so the person can type again. The same words
    also open the page (`consent`'s summary, linking to the field), for a screen reader and a
    desktop, where the whole page fits."""
    attrs = (
        'id="code" name="code" autocomplete="off" autocapitalize="characters" autocorrect="off"'
        ' spellcheck="false" enterkeyhint="go" maxlength="12" placeholder="XXXX-XXXX" required'
    )
    if not error:
        return f'<label for="code">Code from your home</label><input {attrs}>'
    return (
        '<label for="code">Code from your home</label>'
        f'<p class="error" id="code-error">{shown(_sentence(error))}</p>'
        f'<input {attrs} autofocus aria-invalid="true" aria-describedby="code-error">'
    )


CHANGE_WORDS = {
    Scope.FTW_DISPATCH_WRITE.value: "start and stop charging for up to {minutes} minutes at a time",
    Scope.FTW_GOALS_WRITE.value: "ask you for lasting changes, such as a car's charge target or the"
    " site's mode, which you approve or deny at home",
}
"""What each control scope lets an assistant change, in the owner's words (PROTOCOL.md part E)."""


def _changes(scopes: tuple[str, ...]) -> str:
    """The consent page's list of what the assistant could change, apart from what it could
    read (docs/control.md, "Consent"), and that the owner may approve reading only."""
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
    """The page that follows the request (it reloads itself every 2 s), naming the home the
    code belongs to."""
    home = f" <strong>{shown(p.home)}</strong>" if p.home else ""
    body = (
        f"<h1>Waiting for your home</h1><p>Approve <strong>{shown(p.client_name)}</strong> at"
        f" your home{home}, on its box or its app. This page moves on by itself.</p>"
        f'<p class="muted">{LASTS}</p>'
    )
    return _page("Waiting for your home", body, refresh_s=2)


def problem(message: str, refresh_s: int | None = None) -> bytes:
    """A page for errors that must not go back to the client's redirect URI; with
    `refresh_s`, it reloads itself after that many seconds (a passing fault)."""
    return _page(
        "Cannot connect",
        f"<h1>Cannot connect the assistant</h1><p>{shown(message)}</p>",
        refresh_s,
    )
