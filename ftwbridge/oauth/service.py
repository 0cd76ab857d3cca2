"""The authorization server's logic: clients, consent requests, codes, tokens (no HTTP here).

Flow (README "Connecting a desktop assistant", docs/auth.md): a public client registers
(RFC 7591), sends the person to `/authorize` with PKCE S256 (RFC 7636) and our `/mcp` as
`resource` (RFC 8707); the person types the home-claim code their box shows (PROTOCOL.md
part C), which tells us the home; the keys part makes the agent's key and the door sends the
box `agent.request`; the owner approves at home and the box publishes a roster listing the
agent, or answers `agent.denied`. The page then redirects with a one-time code (60 s), which
`/oauth/token` exchanges for a one-hour access token and a rotating refresh token.

Where the sign-in state lives (`oauth/persist.py`): codes in the store, by hash, in every
mode. On one process (SQLite), consent requests live in memory, written through so they
outlive a restart, and claim offers in the door. With `shared` (many instances on PostgreSQL,
behind a load balancer that sends each step anywhere) the store is the truth for consent
requests and claim offers too: every step reads them from it and changes them with a
compare-and-set, `agent.request` goes to the home's holder (`send_to_box`, routed by the mesh),
the holder approves from the store once a roster listing the agent is saved
(`on_roster_saved`), and a denial heard there is written at once. Clients, access tokens and
refresh tokens are in the store, tokens only as SHA-256 hashes.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable

from ftwbridge.door import Door, HomeOffline
from ftwbridge.keys import KeysPort
from ftwbridge.keys.service import KeysError
from ftwbridge.proto.claim import code_hash
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.registry import Msg
from ftwbridge.store import StoreError
from ftwbridge.store.base import hash_token

from .answers import OwnerAnswers
from .authorize import checked_request, redirect_of
from .cimd import MetadataDocuments
from .grace import Rotations
from .limits import OAuthLimits
from .model import (
    CODE_TTL_MS,
    MAX_CLAIM_TRIES,
    MAX_PENDING,
    REQUEST_TTL_MS,
    CodeGrant,
    IssueAccess,
    OAuthError,
    OAuthStore,
    Pending,
    present,
)
from .persist import CLAIM, CODE, CONSENT, pending_from
from .redirects import (
    redirect_label,
)
from .registration import ClientRegistration
from .scopes import granted_scopes, ops_for
from .shedding import Open, to_shed
from .tokens import TokenGrants

log = logging.getLogger("ftwbridge.oauth")

SendToBox = Callable[[str, Envelope], Awaitable[None]]
"""(home, door message) -> sent to the home's box; raises `HomeOffline` when it cannot be."""


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
        shared: the store is shared with other instances (PostgreSQL): it is the truth for
            consent requests and claim offers (module docstring); the door's claim offers go
            to it as they come (the door's `claim_offered` listener, `OwnerAnswers`).
        on_signin: told (step, outcome) of each sign-in step (`audit.SignInAudit`).
        answers: the home's answers (`answers.OwnerAnswers`), built first so the door is
            given its listeners when it is built; None builds one here from `store`,
            `clock`, `shared` and `on_signin` (a door that tells nobody: tests).

    Attributes:
        send_to_box: how `agent.request` reaches the box; None: this door's `send_to_box`
            (one process). A cluster sets the mesh's relay, which reaches the holder.
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
        shared: bool = False,
        on_signin: Callable[[str, str], None] | None = None,
        answers: OwnerAnswers | None = None,
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
        if answers is None:
            answers = OwnerAnswers(store=store, clock=clock, shared=shared, on_signin=on_signin)
        self.answers = answers
        self._pending = answers.pending
        self._limits = OAuthLimits(store)
        self._rotations = Rotations(refresh_grace_ms)
        self._shared = shared
        self.audit = answers.audit
        self.send_to_box: SendToBox | None = None

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
        await self._make_room(address, now)
        params = present(params)
        client_id = params.get("client_id", "")
        client = await self._client(client_id, now, address)
        asked = params.get("redirect_uri")
        redirect_uri = redirect_of(client["redirect_uris"], asked)
        state, challenge = checked_request(params, self._resource())
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
            source=address,
        )
        if not self._shared:
            self._pending[pending.id] = pending
        await self._save(pending)
        return pending

    async def _make_room(self, address: str, now: int) -> None:
        """Keep the consent requests open at once within `MAX_PENDING` (every instance's,
        when shared; instances racing may pass it by a few): when full, the heaviest source's
        oldest request ends (`shedding.to_shed`), so a first request is never refused because
        of other sources' requests.

        Raises:
            OAuthError: 429 when `address` itself holds the most open requests.
        """
        if self._shared:
            if await self._store.count_oauth_states(CONSENT, now) < MAX_PENDING:
                return
            found = await self._store.find_oauth_states(CONSENT, now, {})
            held = [pending_from(r) for _, r, _ in found]
        else:
            if len(self._pending) < MAX_PENDING:
                return
            held = list(self._pending.values())
        victim = to_shed((Open(p.id, p.source, p.expires_at_ms) for p in held), address)
        if victim is None:
            raise OAuthError(
                "temporarily_unavailable",
                "too many sign-ins in progress from your address; finish or close one first",
                429,
            )
        shed = next(p for p in held if p.id == victim.id)
        log.warning(
            "consent requests full (%d): ended the oldest of source %s, which holds the most",
            MAX_PENDING,
            victim.source,
        )
        await self.forget(shed)

    async def get(self, req: str) -> Pending | None:
        """The consent request `req`, or None when unknown or expired. Shared: as the store
        has it now (another instance may have changed it); a request still `asked` whose
        agent the home's newest roster lists is approved here (the holder's approval was lost,
        e.g. the database failed as it saved the roster: any roster listing the new key is the
        owner's yes)."""
        if self._shared:
            pending = await self._load(req)
            if pending is None or pending.status != "asked" or pending.home is None:
                return pending
            roster = await self._door.roster(pending.home)
            if roster is None or pending.agent_key not in roster.agents():
                return pending
            if await self._change(pending, {"status": "asked"}, status="approved"):
                self.answers.answered(pending, "approved")
                return pending
            return await self._load(req)  # another step changed it first
        await self._expire(self._clock())
        pending = self._pending.get(req)
        if pending is not None and pending.status != pending.saved_status:
            await self._save(pending)  # a denial heard from the box (`agent_denied`: no I/O)
        return pending

    async def claim(self, req: str, csrf: str, code: str, address: str = "unknown") -> Pending:
        """The person typed their home's claim code: find the home and ask its owner.

        The request is marked `asked` (with its home and new agent key) before `agent.request`
        goes out, so an owner who approves at once finds it asked wherever the roster lands.

        Raises:
            OAuthError: unknown request, a bad form token, a wrong code (the request is burned
                after 5), or an offline home (`temporarily_unavailable`, 503).
            StoreError: the database does not answer (the edge answers 503 in words); a key
                made for the request is dropped.
        """
        pending = await self.get(req)
        if pending is None or not secrets.compare_digest(pending.csrf, csrf):
            raise OAuthError("invalid_request", "this consent request is unknown or has expired")
        if pending.status != "new":
            return pending
        taken = await self._limits.guess(address, self._clock())
        digest = code_hash(code)
        home = None if digest is None else await self._take_claim(digest)
        if home is None:
            tries = pending.tries + 1
            # two wrong codes at two instances at once may count once: the limits above hold
            await self._change(
                pending,
                {"status": "new", "tries": pending.tries},
                tries=tries,
                status="failed" if tries >= MAX_CLAIM_TRIES else "new",
            )
            raise OAuthError(
                "access_denied", "that code is not one a home is showing now", outcome="wrong_code"
            )
        await self._limits.right_guess(taken, self._clock())
        try:
            key = await self._keys.create(home)
        except KeysError:
            raise OAuthError(
                "temporarily_unavailable",
                "the bridge's key service does not answer; have your home show a new code and"
                " try again in a minute",
                503,
            ) from None
        try:
            asked = await self._change(
                pending, {"status": "new"}, status="asked", home=home, agent_key=key
            )
        except StoreError:  # no record names the key, and no roster will list it
            await self._drop_key(key, home)
            raise
        if not asked:
            await self._drop_key(key, home)  # another post of the form got there first
            now = await self.get(req)
            if now is None:
                raise OAuthError(
                    "invalid_request", "this consent request is unknown or has expired"
                )
            return now
        await self._ask_owner(pending, home, key)
        return pending

    async def _ask_owner(self, pending: Pending, home: str, key: bytes) -> None:
        """Send the home's box `agent.request` for `pending`'s new agent `key` (PROTOCOL.md
        part C); the owner answers at home.

        Raises:
            OAuthError: the home is offline (503); the key is dropped, the request failed.
        """
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
        send = self.send_to_box or self._door.send_to_box
        try:
            await send(home, Envelope(Msg.AGENT_REQUEST, None, body))
        except HomeOffline:
            await self._drop_key(key, home)
            await self._change(pending, {"status": "asked"}, status="failed")
            raise OAuthError("temporarily_unavailable", "the home is offline", 503) from None

    async def _take_claim(self, digest: bytes) -> str | None:
        """The home whose open claim offer has this code hash, used once, or None."""
        now = self._clock()
        if not self._shared:
            return self._door.take_claim(digest, now)
        record = await self._store.take_oauth_state(CLAIM, digest.hex(), now)
        return None if record is None else str(record["home"])

    async def _expire(self, now: int) -> None:
        """End what expired: consent requests (their unlisted keys dropped; shared: each by
        the one instance whose sweep deleted it), claim offers (shared), and codes past their
        keeping time."""
        if self._shared:
            for _, record, _ in await self._store.expire_oauth_states(CONSENT, now):
                await self._drop_unlisted(pending_from(record))
            await self._store.expire_oauth_states(CLAIM, now)
        else:
            for p in [p for p in self._pending.values() if p.expires_at_ms <= now]:
                await self.forget(p)
        await self._store.expire_oauth_states(CODE, now)  # used codes stay so a replay revokes

    async def deliver(self, pending: Pending) -> str | None:
        """An approved request's code goes to the client's redirect: the request ends and its
        code is made now (60 s; kept only by hash). Of two polls at once (at two instances),
        one gets the code; the other gets None (the request is over)."""
        now = self._clock()
        if self._shared:
            record = await self._store.take_oauth_state(
                CONSENT, pending.id, now, where={"status": "approved"}
            )
            if record is None:
                return None
            pending = pending_from(record)
        else:
            if self._pending.pop(pending.id, None) is None:
                return None
            await self._unsave(pending)
        pending.code = secrets.token_urlsafe(32)
        await self._save_code(hash_token(pending.code), CodeGrant(pending, now + CODE_TTL_MS))
        return pending.code

    async def forget(self, pending: Pending) -> None:
        """End a consent request that will not complete; its unlisted key is dropped."""
        if self._shared:
            record = await self._store.take_oauth_state(
                CONSENT, pending.id, self._clock(), where={"status": pending.status}
            )
            if record is not None:
                await self._drop_unlisted(pending_from(record))
            return
        self._pending.pop(pending.id, None)
        await self._unsave(pending)
        await self._drop_unlisted(pending)

    async def _drop_unlisted(self, pending: Pending) -> None:
        if pending.agent_key is not None and pending.status != "approved":
            await self._drop_key(pending.agent_key, pending.home)

    async def _drop_key(self, key: bytes, home: str | None) -> None:
        """Drop an agent key no roster will list; when the keys part does not answer, the key
        stays there, unused, and the sign-in goes on (logged: it is the keys part's garbage,
        not the person's problem)."""
        try:
            await self._keys.drop(key)
        except KeysError as exc:
            log.warning("an unused agent key of home %s was not dropped: %s", home, exc)
