"""The authorization server's logic: clients, consent requests, codes, tokens (no HTTP here).

Flow (README "Connecting a desktop assistant", docs/auth.md): a public client registers
(RFC 7591), sends the person to `/authorize` with PKCE S256 (RFC 7636) and our `/mcp` as
`resource` (RFC 8707); the person types the home-claim code their box shows (PROTOCOL.md
part C), which tells us the home; the keys part makes the agent's key and the door sends the
box `agent.request`; the owner approves at home and the box publishes a roster listing the
agent, or answers `agent.denied`. The page then redirects with a one-time code (60 s), which
`/oauth/token` exchanges for a one-hour access token and a rotating refresh token.

Codes and consent requests live in memory (a restart drops them; the person starts again);
clients, access tokens and refresh tokens are in the store, tokens only as SHA-256 hashes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from ftwbridge.door import Door, HomeOffline
from ftwbridge.keys import KeysPort
from ftwbridge.proto.claim import code_hash
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import Roster

from .cimd import MetadataDocuments
from .grace import Rotations
from .limits import OAuthLimits
from .model import (
    CODE_TTL_MS,
    MAX_CLAIM_TRIES,
    MAX_PENDING,
    MAX_STATE_CHARS,
    REQUEST_TTL_MS,
    USED_CODE_KEEP_MS,
    CodeGrant,
    IssueAccess,
    OAuthError,
    OAuthStore,
    Pending,
    present,
    token_hash,
    valid_challenge,
)
from .redirects import (
    matching_redirect,
    redirect_kind,
    redirect_label,
)
from .registration import ClientRegistration
from .scopes import granted_scopes, ops_for
from .tokens import TokenGrants


class OAuthService(ClientRegistration, TokenGrants):
    """The bridge's authorization server.

    Args:
        store: clients and refresh tokens.
        keys: makes each new agent's key (and drops it if consent never completes).
        door: claim offers, `agent.request` to the box, `agent.denied` back.
        issuer: our issuer URL (the public URL); `resource` is our `/mcp` URL.
        clock: the bridge's wall clock in ms since the epoch.
        issue_access: mints an access token (home, agent key, agent id, scopes, client) -> text.
        documents: fetches Client ID Metadata Documents; None turns them off.
        on_revoke: called after tokens are revoked (the bridge empties its token cache).
        refresh_grace_ms: repeats of a refresh within this many ms get the same pair (`grace`).
    """

    def __init__(
        self,
        *,
        store: OAuthStore,
        keys: KeysPort,
        door: Door,
        issuer: Callable[[], str],
        resource: Callable[[], str],
        clock: Callable[[], int],
        issue_access: IssueAccess,
        documents: MetadataDocuments | None = None,
        on_revoke: Callable[[], None] = lambda: None,
        refresh_grace_ms: int = 10_000,
    ) -> None:
        self._store = store
        self._keys = keys
        self._door = door
        self._issuer = issuer
        self._resource = resource
        self._clock = clock
        self._issue_access = issue_access
        self._documents = documents
        self._on_revoke = on_revoke
        self._pending: dict[str, Pending] = {}
        self._limits = OAuthLimits(store)
        self._codes: dict[bytes, CodeGrant] = {}
        self._rotations = Rotations(refresh_grace_ms)
        door.on_denied = self._denied

    # -- authorize ------------------------------------------------------------------------

    async def start(self, params: dict[str, str], address: str = "unknown") -> Pending:
        """Check an authorization request and open a consent request. `address` is the
        browser's address (`limits.client_address`), limited per address.

        Every refusal is shown to the person as a page, never redirected: registration is open,
        so redirecting errors would make the bridge an open redirector (RFC 9700 4.11.2).

        Raises:
            OAuthError: what is wrong with the request.
        """
        now = self._clock()
        await self._expire(now)
        await self._limits.start(address, now)
        if len(self._pending) >= MAX_PENDING:
            raise OAuthError(
                "temporarily_unavailable", "too many sign-ins in progress; try again soon", 503
            )
        params = present(params)
        client_id = params.get("client_id", "")
        client = await self._client(client_id, now)
        registered: list[str] = client["redirect_uris"]
        asked = params.get("redirect_uri")
        if asked is None and len(registered) == 1 and redirect_kind(registered[0]) != "loopback":
            redirect_uri = registered[0]  # OAuth 2.1 section 4.1.1: optional with one URI
        elif asked is None:
            raise OAuthError("invalid_request", "redirect_uri is required for this client")
        else:
            found = matching_redirect(registered, asked)
            if found is None:
                raise OAuthError("invalid_request", "redirect_uri is not one the client registered")
            redirect_uri = found
        state = params.get("state")
        if state is not None and len(state) > MAX_STATE_CHARS:
            raise OAuthError("invalid_request", "state is too long")
        if params.get("response_type") != "code":
            raise OAuthError("unsupported_response_type", "response_type must be code")
        challenge = params.get("code_challenge", "")
        if params.get("code_challenge_method") != "S256" or not valid_challenge(challenge):
            raise OAuthError("invalid_request", "PKCE with code_challenge_method S256 is required")
        if params.get("resource", self._resource()) != self._resource():
            raise OAuthError("invalid_target", "resource must be this bridge's /mcp URL")
        asked_scopes = granted_scopes(params.get("scope", ""))
        name = str(client.get("client_name") or client_id)
        pending = Pending(
            secrets.token_urlsafe(32),
            client_id,
            name,
            redirect_uri,
            state,
            challenge,
            tuple(sorted(set(asked_scopes))),
            secrets.token_urlsafe(32),
            now + REQUEST_TTL_MS,
            redirect_given=asked is not None,
        )
        self._pending[pending.id] = pending
        await self._save(pending)
        return pending

    async def get(self, req: str) -> Pending | None:
        """The consent request `req`, or None when unknown or expired."""
        await self._expire(self._clock())
        pending = self._pending.get(req)
        if pending is not None and pending.status != pending.saved_status:
            await self._save(pending)  # a denial heard from the box (`_denied` cannot wait)
        return pending

    async def claim(self, req: str, csrf: str, code: str, address: str = "unknown") -> Pending:
        """The person typed their home's claim code: find the home and ask its owner.

        Raises:
            OAuthError: unknown request, a bad form token, a wrong code (the request is burned
                after 5), or an offline home.
        """
        pending = await self.get(req)
        if pending is None or not secrets.compare_digest(pending.csrf, csrf):
            raise OAuthError("invalid_request", "this consent request is unknown or has expired")
        if pending.status != "new":
            return pending
        await self._limits.guess(address, self._clock())
        digest = code_hash(code)
        home = None if digest is None else self._door.take_claim(digest, self._clock())
        if home is None:
            pending.tries += 1
            if pending.tries >= MAX_CLAIM_TRIES:
                pending.status = "failed"
            await self._save(pending)
            raise OAuthError("access_denied", "that code is not one a home is showing now")
        await self._limits.right_guess(address, self._clock())
        key = await self._keys.create(home)
        pending.home, pending.agent_key = home, key
        body = {
            "req": pending.id,
            "client": pending.client_id,
            "name": pending.client_name,
            "redirectHost": redirect_label(pending.redirect_uri)[1],
            "scopes": list(pending.scopes),
            "ops": ops_for(pending.scopes),
            "caps": {},
            "key": key,
            "expiresAtMs": pending.expires_at_ms,
        }
        try:
            await self._door.send_to_box(home, Envelope(Msg.AGENT_REQUEST, None, body))
        except HomeOffline:
            await self._keys.drop(key)
            pending.status = "failed"
            await self._save(pending)
            raise OAuthError("temporarily_unavailable", "the home is offline", 503) from None
        pending.status = "asked"
        await self._save(pending)
        return pending

    async def on_roster(self, home: str, roster: Roster) -> None:
        """A new roster: requests whose agent it lists are approved and get their code."""
        listed = roster.agents()
        for pending in list(self._pending.values()):
            if pending.status == "asked" and pending.home == home and pending.agent_key in listed:
                pending.status = "approved"
                pending.code = secrets.token_urlsafe(32)
                entry = CodeGrant(pending, self._clock() + CODE_TTL_MS)
                self._codes[token_hash(pending.code)] = entry
                await self._save_code(token_hash(pending.code), entry)
                await self._save(pending)

    def _denied(self, home: str, req: str) -> None:
        pending = self._pending.get(req)
        if pending is not None and pending.home == home and pending.status == "asked":
            pending.status = "denied"

    async def _expire(self, now: int) -> None:
        gone = [p for p in self._pending.values() if p.expires_at_ms <= now]
        for p in gone:
            await self.forget(p)
        for digest in [
            d for d, c in self._codes.items() if c.expires_at_ms + USED_CODE_KEEP_MS <= now
        ]:
            del self._codes[digest]  # used codes stay a while so a replay still revokes
            await self._unsave_code(digest)

    async def delivered(self, pending: Pending) -> None:
        """The code went to the client's redirect: the request ends (the code lives on)."""
        self._pending.pop(pending.id, None)
        await self._unsave(pending)

    async def forget(self, pending: Pending) -> None:
        """End a consent request that will not complete; its unlisted key is dropped."""
        self._pending.pop(pending.id, None)
        await self._unsave(pending)
        if pending.agent_key is not None and pending.status != "approved":
            await self._keys.drop(pending.agent_key)
