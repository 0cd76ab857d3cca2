"""The consent pages a person's browser sees at `/authorize` (docs/auth.md): the request's
page (`GET`), the claim code typed or the request declined (`POST`), and the waiting page
that polls until the home's owner answered, then sends the browser back to the client with
the code or `access_denied` (RFC 6749 section 4.1.2). Errors are pages, never redirects
(`OAuthService.start`)."""

from __future__ import annotations

from quart import Response, request
from quart_trio import QuartTrio

from ftwbridge.oauth import OAuthError, OAuthService, pages
from ftwbridge.oauth.model import ConsentStatus
from ftwbridge.oauth.refuse import refuse_consent
from ftwbridge.site import Site

NO_STORE = {"cache-control": "no-store", "pragma": "no-cache"}
"""What no cache may keep: a code's redirect, a token, a registration."""


def add_consent_pages(app: QuartTrio, site: Site, oauth: OAuthService) -> None:
    """`/authorize` (the request's page and its form) and `/authorize/wait` on `app`."""
    add_authorize(app, site, oauth)
    add_waiting(app, site, oauth)


def add_authorize(app: QuartTrio, site: Site, oauth: OAuthService) -> None:
    """`GET /authorize` (a new consent request's page) and `POST /authorize` (its form: the
    claim code, or "Don't allow"; a form posted from another origin is refused, 403)."""

    @app.route("/authorize", methods=["GET"])
    async def authorize() -> Response:
        try:
            with oauth.audit.step(
                "consent", client=request.args.get("client_id", "-"), source=site.client()
            ):
                pending = await oauth.start(dict(request.args.items()), site.client())
        except OAuthError as exc:  # a page, never a redirect (see OAuthService.start)
            status = exc.status if exc.status in (429, 503) else 400
            return Response(pages.problem(exc.description), status, pages.PAGE_HEADERS)
        return Response(pages.consent(pending), 200, pages.headers_for(pending))

    @app.route("/authorize", methods=["POST"])
    async def authorize_claim() -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() not in site.allowed_origins:
            return Response(
                pages.problem("This form was posted from another site."), 403, pages.PAGE_HEADERS
            )
        form = await request.form
        req = str(form.get("req", ""))
        issuer = site.public_url.rstrip("/")
        if form.get("decision") == "deny":
            return await refuse_consent(oauth, req, str(form.get("csrf", "")), issuer)
        try:
            with oauth.audit.step("claim", source=site.client()) as step:
                asked = await oauth.claim(
                    req, str(form.get("csrf", "")), str(form.get("code", "")), site.client()
                )
                # a right code asked the home; its answer may already be in (`--approve-all`)
                step.outcome, step.client = ConsentStatus.ASKED, asked.client_id
                step.home = asked.home or "-"
        except OAuthError as exc:
            pending = await oauth.get(req)
            if pending is not None and pending.status == ConsentStatus.FAILED:
                await oauth.forget(pending)
                return Response(
                    b"", 303, {"location": pending.redirect(issuer, error="access_denied")}
                )
            if pending is None or exc.error != "access_denied":
                return Response(
                    pages.problem(exc.description),
                    exc.status if exc.status in (429, 503) else 400,
                    pages.PAGE_HEADERS,
                )
            return Response(
                pages.consent(pending, exc.description), 400, pages.headers_for(pending)
            )
        return Response(b"", 303, {"location": f"/authorize/wait?req={req}"})


def add_waiting(app: QuartTrio, site: Site, oauth: OAuthService) -> None:
    """`GET /authorize/wait`: the waiting page until the owner answers; then a 303 back to the
    client with the code (delivered once) or `access_denied`."""

    @app.route("/authorize/wait")
    async def authorize_wait() -> Response:
        pending = await oauth.get(str(request.args.get("req", "")))
        if pending is None:
            return Response(
                pages.problem(
                    "This request is unknown or has expired; start again from your assistant."
                ),
                400,
                pages.PAGE_HEADERS,
            )
        issuer = site.public_url.rstrip("/")
        if pending.status == ConsentStatus.APPROVED:
            code = await oauth.deliver(pending)  # the code goes out once; the request ends here
            if code is None:  # another poll (at another instance, perhaps) delivered it
                return Response(
                    pages.problem("This request has ended; its answer went to your assistant."),
                    400,
                    pages.PAGE_HEADERS,
                )
            return Response(b"", 303, {"location": pending.redirect(issuer, code=code)} | NO_STORE)
        if pending.status in (ConsentStatus.DENIED, ConsentStatus.FAILED):
            await oauth.forget(pending)
            return Response(
                b"", 303, {"location": pending.redirect(issuer, error="access_denied")} | NO_STORE
            )
        return Response(pages.waiting(pending), 200, pages.headers_for(pending))
