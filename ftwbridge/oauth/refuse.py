"""The consent page's "Don't allow": the person declines, and the client hears `access_denied`.

RFC 6749 section 4.1.2.1: when "the resource owner or authorization server denied the
request", the authorization server redirects to the client's redirect URI with
`error=access_denied` (and `state`, and RFC 9207's `iss`). The request ends here; no home is
asked. A request already sent to the home (the person typed a code first) is not cancelled by
a stale page: it goes on to the page that follows it.
"""

from __future__ import annotations

import secrets

from quart import Response

from . import OAuthService, pages
from .model import ConsentStatus

NO_STORE = {"cache-control": "no-store"}


async def refuse_consent(oauth: OAuthService, req: str, csrf: str, issuer: str) -> Response:
    """The answer to a "Don't allow" post of consent request `req` with form token `csrf`:
    303 to the client's redirect URI with `error=access_denied`; 400 in a page for an unknown
    or expired request or a wrong form token (never a redirect: the client is not known to be
    the one asking); 303 to the waiting page when the home has already been asked."""
    pending = await oauth.get(req)
    if pending is None or not secrets.compare_digest(pending.csrf, csrf):
        return Response(
            pages.problem(
                "This request is unknown or has expired; start again from your assistant."
            ),
            400,
            pages.PAGE_HEADERS,
        )
    if pending.status != ConsentStatus.NEW:
        return Response(b"", 303, {"location": f"/authorize/wait?req={pending.id}"} | NO_STORE)
    await oauth.forget(pending)
    location = pending.redirect(
        issuer, error="access_denied", error_description="The person declined the request."
    )
    return Response(b"", 303, {"location": location} | NO_STORE)
