"""Clients: RFC 8414 metadata, RFC 7591 registration, Client ID Metadata Documents."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from .cimd import DocumentRefused, MetadataDocuments, is_document_url
from .limits import OAuthLimits
from .model import (
    CLIENT_TTL_MS,
    MAX_NAME_CHARS,
    MAX_REDIRECT_URIS,
    MAX_URI_CHARS,
    OAuthError,
    OAuthStore,
    cut_text,
    present,
)
from .redirects import RedirectRefused, redirect_kind, valid_redirect
from .scopes import grantable_scopes

GRANT_TYPES = ("authorization_code", "refresh_token")
PUBLIC_ANSWERED_METHODS = frozenset({"none", "client_secret_post", "client_secret_basic"})
"""Requested token-endpoint auth methods that are registered as `none` (a public client)."""


def checked_metadata(body: Any) -> tuple[dict[str, Any], list[str], list[str]]:
    """A registration's metadata checked (RFC 7591 section 2; the rules in
    `ClientRegistration.register`): returns (the members present, its redirect URIs, its
    grant types).

    Raises:
        OAuthError: `invalid_redirect_uri` or `invalid_client_metadata`, with the reason.
    """
    if not isinstance(body, dict):
        raise OAuthError("invalid_client_metadata", "the body must be a JSON object")
    body = present(body)
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris or len(uris) > MAX_REDIRECT_URIS:
        raise OAuthError("invalid_redirect_uri", "redirect_uris must list 1 to 8 URIs")
    for uri in uris:
        try:
            redirect_kind(uri)
        except RedirectRefused as exc:
            raise OAuthError("invalid_redirect_uri", str(exc)) from None
    if len(uris) != len(set(uris)):
        raise OAuthError("invalid_redirect_uri", "a redirect URI is listed twice")
    method = body.get("token_endpoint_auth_method", "none")
    if method not in PUBLIC_ANSWERED_METHODS:
        raise OAuthError(
            "invalid_client_metadata",
            "token_endpoint_auth_method must be none, client_secret_post or "
            "client_secret_basic (this server registers public clients)",
        )
    grants = body.get("grant_types", list(GRANT_TYPES))
    if not isinstance(grants, list) or not all(isinstance(g, str) for g in grants):
        raise OAuthError("invalid_client_metadata", "grant_types must be a list of strings")
    if "authorization_code" not in grants:
        raise OAuthError("invalid_client_metadata", "grant_types must include authorization_code")
    responses = body.get("response_types", ["code"])
    if not isinstance(responses, list) or "code" not in responses:
        raise OAuthError("invalid_client_metadata", "response_types must include code")
    return body, uris, grants


class ClientRegistration:
    """Metadata, registration and client lookup; `OAuthService` supplies the state."""

    _store: OAuthStore
    _issuer: Callable[[], str]
    _clock: Callable[[], int]
    _documents: MetadataDocuments | None
    _limits: OAuthLimits

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 authorization-server metadata."""
        base = self._issuer().rstrip("/")
        return {
            "issuer": base,
            "authorization_endpoint": base + "/authorize",
            "token_endpoint": base + "/oauth/token",
            "registration_endpoint": base + "/oauth/register",
            "revocation_endpoint": base + "/oauth/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": sorted(grantable_scopes()),
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": self._documents is not None,
        }

    async def register(self, body: Any, address: str = "unknown") -> dict[str, Any]:
        """Dynamic client registration (RFC 7591) of a public client; `body` is the parsed JSON.

        Empty members count as omitted (RFC 6749 section 3.1) and unknown ones are ignored. A
        client asking for `client_secret_post` or `client_secret_basic` is registered as a public
        client and told `"none"`: RFC 7591 section 3.2.1 lets the server replace requested
        metadata and says the response carries what was kept. Unsupported grant types are dropped
        the same way; `authorization_code` must remain.

        `address` is the client's address (`limits.client_address`) for the per-address limit.

        Returns: the metadata kept, `client_id` and `client_id_issued_at` (seconds) included.

        Raises:
            OAuthError: `invalid_redirect_uri` (with the reason), `invalid_client_metadata`
                (RFC 7591 section 3.2.2), or `temporarily_unavailable`: 429 past a limit,
                503 when the limit cannot be counted (`OAuthLimits`).
        """
        body, uris, grants = checked_metadata(body)
        now = self._clock()
        await self._limits.register(address, now)
        client_id = "c_" + secrets.token_urlsafe(16)
        meta = {
            "client_id": client_id,
            "client_id_issued_at": now // 1000,
            "client_name": cut_text(body.get("client_name"), MAX_NAME_CHARS),
            "redirect_uris": list(uris),
            "grant_types": [g for g in GRANT_TYPES if g in grants],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
        if isinstance(body.get("client_uri"), str):
            meta["client_uri"] = body["client_uri"][:MAX_URI_CHARS]
        if isinstance(body.get("scope"), str):
            meta["scope"] = body["scope"][:MAX_URI_CHARS]
        await self._store.purge_clients(now)
        await self._store.put_client(client_id, meta, now + CLIENT_TTL_MS)
        return meta

    async def _client(self, client_id: str, now: int, source: str = "-") -> dict[str, Any]:
        """A registered client, or one named by its metadata document's URL."""
        if self._documents is not None and is_document_url(client_id):
            try:
                doc = await self._documents.fetch(client_id, source)
            except DocumentRefused as exc:
                raise OAuthError("invalid_client", str(exc)) from None
            uris = doc.get("redirect_uris")
            if (
                not isinstance(uris, list)
                or not uris
                or len(uris) > MAX_REDIRECT_URIS
                or not all(valid_redirect(u) for u in uris)
            ):
                raise OAuthError(
                    "invalid_client", "the metadata document's redirect URIs are not allowed"
                )
            return {
                "client_id": client_id,
                "client_name": cut_text(doc.get("client_name"), MAX_NAME_CHARS),
                "redirect_uris": uris,
            }
        client = await self._store.client(client_id, now) if client_id else None
        if client is None:
            raise OAuthError("invalid_client", "unknown or expired client_id")
        return client
