"""The token endpoint's grants (RFC 6749 sections 4.1.3 and 6, RFC 7636, RFC 8707, RFC 7009)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import trio

from ftwbridge.door import Door
from ftwbridge.store import hash_token
from ftwbridge.store.rotations import Child, RefreshState, refresh_rotations

from .cimd import is_document_url
from .grace import Rotations, open_answer, seal_answer
from .model import (
    REFRESH_TTL_MS,
    IssueAccess,
    OAuthError,
    OAuthStore,
    Pending,
    present,
    s256,
    valid_verifier,
)
from .persist import CODE, SavedSignIns, code_from

APPROVING_ROSTER_S = 5.0
"""The longest a code exchange waits for the roster that approved it to reach this instance,
seconds (the holder's store write and the `roster` event, on a loaded machine; it takes a few
ms when all is well)."""


def expires_in_s(expires_at_ms: int, now_ms: int) -> int:
    """RFC 6749 section 5.1 `expires_in`: whole seconds from `now_ms` until the access token's
    stored expiry (`token_ttl_s` after minting), rounded to the nearest second, never below 0."""
    return max(0, (expires_at_ms - now_ms + 500) // 1000)


def refresh_record(
    home: str, agent_key: bytes, scopes: tuple[str, ...], client: str
) -> dict[str, Any]:
    """A refresh token's record in the store: what a refresh grants again."""
    return {"home": home, "agentKey": agent_key.hex(), "scopes": list(scopes), "client": client}


def need(form: dict[str, str], *names: str) -> None:
    """Raise `invalid_request` (RFC 6749 section 5.2) naming the first of `names` missing."""
    for name in names:
        if name not in form:
            raise OAuthError("invalid_request", f"{name} is required")


class TokenGrants(SavedSignIns):
    """Code exchange, refresh rotation and revocation; `OAuthService` supplies the state."""

    _store: OAuthStore
    _door: Door
    _clock: Callable[[], int]
    _resource: Callable[[], str]
    _issue_access: IssueAccess
    _pending: dict[str, Pending]
    _on_revoke: Callable[[], None]
    _rotations: Rotations

    # -- token ------------------------------------------------------------------------------

    async def token(self, form: dict[str, str]) -> dict[str, Any]:
        """The token endpoint (RFC 6749 section 4.1.3 and 6, RFC 7636, RFC 8707).

        Empty parameters count as omitted and unknown ones are ignored (RFC 6749 section 3.1).

        Raises:
            OAuthError: in the RFC 6749 section 5.2 shape: `invalid_request` for a missing
                parameter (`grant_type` included), `unsupported_grant_type` for another grant,
                `invalid_target` for another resource (RFC 8707), `invalid_grant` for a code or
                refresh token that is unknown, expired, used, another client's, or whose PKCE
                verifier or redirect URI does not match.
        """
        form = present(form)
        grant = form.get("grant_type")
        if grant is None:
            raise OAuthError("invalid_request", "grant_type is required")
        resource = form.get("resource", self._resource())
        if resource != self._resource():
            raise OAuthError("invalid_target", "resource must be this bridge's /mcp URL")
        if grant == "authorization_code":
            return await self._exchange(form)
        if grant == "refresh_token":
            return await self._refresh(form)
        raise OAuthError(
            "unsupported_grant_type", "grant_type must be authorization_code or refresh_token"
        )

    async def _exchange(self, form: dict[str, str]) -> dict[str, Any]:
        """Redeem a code, once across every instance (RFC 6749 section 4.1.2): its grant is
        read from the store, checked, then marked used with a compare-and-set; a code used
        before (or whose compare-and-set another instance won) is a replay and revokes what
        it gave. A redeemer whose code is replayed while it mints revokes its own tokens."""
        need(form, "code", "client_id", "code_verifier")
        now = self._clock()
        key = hash_token(form.get("code", "")).hex()
        found = await self._store.oauth_state(CODE, key, now)
        entry = None if found is None else code_from(found[0])
        if entry is None or entry.expires_at_ms <= now:
            raise OAuthError("invalid_grant", "the code is unknown or has expired")
        p = entry.pending
        if entry.used:  # a code used twice: revoke what it gave (RFC 6749 section 4.1.2)
            await self._replayed(key, now)
        asked_redirect = form.get("redirect_uri")
        if p.redirect_given and asked_redirect is None:
            raise OAuthError("invalid_request", "redirect_uri is required, as at /authorize")
        if form["client_id"] != p.client_id or asked_redirect not in (None, p.redirect_uri):
            raise OAuthError(
                "invalid_grant", "client_id or redirect_uri differ from the authorization request"
            )
        verifier = form.get("code_verifier", "")
        if not valid_verifier(verifier) or not secrets.compare_digest(s256(verifier), p.challenge):
            raise OAuthError("invalid_grant", "the PKCE code_verifier does not match")
        family = secrets.token_urlsafe(16)
        won = await self._store.change_oauth_state(
            CODE, key, {"used": True, "family": family}, now, where={"used": False}
        )
        if won is None:  # another instance redeemed it first
            await self._replayed(key, now)
        if self._pending.pop(p.id, None) is not None:
            await self._unsave(p)
        registered = (
            None if is_document_url(p.client_id) else await self._store.client(p.client_id, now)
        )
        if registered is not None:  # a registration that is used lives as long as its grants
            await self._store.put_client(p.client_id, registered, now + REFRESH_TTL_MS)
        assert p.home is not None and p.agent_key is not None
        await self._approving_roster(p.home, p.agent_key)
        refresh = registered is None or "refresh_token" in registered.get("grant_types", [])
        out = await self._tokens(
            p.home, p.agent_key, p.scopes, p.client_id, family, refresh=refresh
        )
        issued = hash_token(out["access_token"])
        kept = await self._store.change_oauth_state(
            CODE, key, {"issued": [issued.hex()]}, self._clock(), where={"replayed": False}
        )
        if kept is None:  # replayed while we minted: what we made goes too
            await self._store.drop_token(issued)
            await self._store.drop_family(family)
            self._on_revoke()
            raise OAuthError("invalid_grant", "the code was already used; its tokens are revoked")
        return out

    async def _approving_roster(self, home: str, agent_key: bytes) -> None:
        """Wait, at most `APPROVING_ROSTER_S`, until this instance sees a roster of `home` that
        lists `agent_key` (32 bytes): the one whose arrival approved the code. The approval may
        come from the instance that holds the home's uplink as soon as its box's roster is in
        effect there, before that roster is in the store, and the `roster` event that tells
        this instance comes later still; a copy held here that lacks the agent is dropped and
        the store read again on each event. Returns when listed or when the wait ends; the
        caller then finds the agent listed or refuses the exchange."""
        listed = await self._door.roster(home)
        if listed is not None and agent_key in listed.agents():
            return
        self._door.forget_roster(home)  # a copy older than the approving roster: read anew
        with trio.move_on_after(APPROVING_ROSTER_S):
            await self._door.wait_roster(home, lambda roster: agent_key in roster.agents())

    async def _replayed(self, key: str, now: int) -> None:
        """Code `key` (its hash, hex) came again after its use: mark it replayed and revoke
        the tokens it gave (a redeemer still minting sees the mark and revokes its own).

        Raises:
            OAuthError: `invalid_grant`, always.
        """
        record = await self._store.change_oauth_state(CODE, key, {"replayed": True}, now)
        if record is not None:
            entry = code_from(record)
            for digest in entry.issued:
                await self._store.drop_token(digest)
            if entry.family:
                await self._store.drop_family(entry.family)
            self._on_revoke()
        raise OAuthError("invalid_grant", "the code was already used; its tokens are revoked")

    async def _access(
        self, home: str, agent_key: bytes, scopes: tuple[str, ...], client: str
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """A new access token's answer (RFC 6749 section 5.1) and the scopes granted: those of
        `scopes` the home's newest roster still grants the agent. `expires_in` is read from
        the access token's stored record, so it is the configured lifetime (`token_ttl_s`).

        Raises:
            OAuthError: `invalid_grant` when the roster no longer lists the agent.
        """
        roster = await self._door.roster(home)
        grant = None if roster is None else roster.agents().get(agent_key)
        if grant is None:
            raise OAuthError("invalid_grant", "the home no longer lists this assistant")
        granted = tuple(s for s in scopes if s in grant.scopes)
        access = await self._issue_access(home, agent_key, grant.id, granted, client)
        held = await self._store.token(hash_token(access))
        if held is None:  # the minter stores before it returns; a store that lost it is broken
            raise OAuthError("server_error", "the access token was not stored", 500)
        out: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": expires_in_s(held.expires_at_ms, self._clock()),
            "scope": " ".join(granted),
        }
        return out, granted

    async def _tokens(
        self,
        home: str,
        agent_key: bytes,
        scopes: tuple[str, ...],
        client: str,
        family: str,
        *,
        refresh: bool = True,
    ) -> dict[str, Any]:
        """A new access token and, when `refresh`, a refresh token in `family` (a client
        registered without the `refresh_token` grant gets none: RFC 6749 section 5.1 makes it
        optional)."""
        out, granted = await self._access(home, agent_key, scopes, client)
        if refresh:
            out["refresh_token"] = new_refresh = secrets.token_urlsafe(32)
            await self._store.put_refresh(
                hash_token(new_refresh),
                family,
                refresh_record(home, agent_key, granted, client),
                self._clock() + REFRESH_TTL_MS,
            )
        return out

    async def _refresh(self, form: dict[str, str]) -> dict[str, Any]:
        """Rotate a refresh token (RFC 6749 section 6, OAuth 2.1 section 4.3.1, RFC 9700
        section 4.14.2). Refreshes of one token within `refresh_grace_ms` of its first use get
        the pair that first use made, at whichever instance they arrive (`grace`); a use after
        that, or after the new refresh token was used, revokes the family."""
        need(form, "refresh_token", "client_id")
        token = form["refresh_token"]
        digest = hash_token(token)
        kept = refresh_rotations(self._store)
        async with self._rotations.turn(digest):
            now = self._clock()
            state = await kept.refresh_state(digest, now)
            if state is None:  # unknown tokens leave no trace
                raise OAuthError("invalid_grant", "the refresh token is unknown or has expired")
            if form["client_id"] != state.record["client"]:
                # checked before the token is used, so another client cannot burn it
                raise OAuthError("invalid_grant", "the refresh token belongs to another client")
            if not state.used:
                out, state = await self._rotate(token, digest, state)
                if out is not None:
                    return out
            return await self._repeat(token, state)

    async def _rotate(
        self, token: str, digest: bytes, state: RefreshState
    ) -> tuple[dict[str, Any] | None, RefreshState]:
        """Mint the new pair, then use the token in one transaction that keeps the pair's
        answer sealed for repeats. Returns the answer, or None and the token's state when
        another instance used it first (the pair minted here is dropped unseen).

        Raises:
            OAuthError: `invalid_grant` when the token went meanwhile (revoked or expired), or
                when the home no longer lists the agent (the token is then left unused).
        """
        record = state.record
        key = bytes.fromhex(record["agentKey"])
        out, granted = await self._access(
            record["home"], key, tuple(record["scopes"]), record["client"]
        )
        out["refresh_token"] = new_refresh = secrets.token_urlsafe(32)
        now = self._clock()
        child = Child(
            hash_token(new_refresh),
            refresh_record(record["home"], key, granted, record["client"]),
            now + REFRESH_TTL_MS,
            seal_answer(token, out),
            self._rotations.until_ms(now),
        )
        before = await refresh_rotations(self._store).rotate(digest, now, child)
        if before is not None and not before.used:
            return out, before
        await self._store.drop_token(hash_token(out["access_token"]))
        if before is None:
            raise OAuthError("invalid_grant", "the refresh token is unknown or has expired")
        return None, before

    async def _repeat(self, token: str, state: RefreshState) -> dict[str, Any]:
        """Answer a refresh token that was already used: within its grace window, the pair its
        first use made; after it (or once that pair's refresh token was used) the family and
        the agent's access tokens are revoked (RFC 9700 section 4.14.2).

        Raises:
            OAuthError: `invalid_grant`, saying which.
        """
        record = state.record
        if state.graced is None:  # a rotated-out refresh token came back after the window
            await self._revoke_family(
                state.family, record["home"], bytes.fromhex(record["agentKey"])
            )
            raise OAuthError(
                "invalid_grant", "the refresh token was already used; the grant is revoked"
            )
        try:
            answer = open_answer(token, state.graced.sealed)
        except ValueError:  # the store's row was altered: answer nothing from it
            raise OAuthError("server_error", "the earlier answer cannot be read", 500) from None
        held = await self._store.token(hash_token(str(answer.get("access_token"))))
        if held is None:  # revoked meanwhile (RFC 7009): no pair to give again
            raise OAuthError(
                "invalid_grant", "the refresh token was already used and its answer revoked"
            )
        answer["expires_in"] = expires_in_s(held.expires_at_ms, self._clock())
        return answer

    async def _revoke_family(self, family: str, home: str, agent_key: bytes) -> None:
        """Revoke a refresh family (its graced answers go with it) and the agent's access
        tokens."""
        await self._store.drop_family(family)
        await self._store.drop_agent_tokens(home, agent_key)
        self._on_revoke()

    async def revoke(self, form: dict[str, str]) -> str | None:
        """RFC 7009 revocation: an access token stops working; a refresh token takes its family
        and the agent's access tokens with it. Unknown tokens are ignored, as the RFC says.
        Returns the home of the token revoked, `""` for an access token, None for a token not
        held (the audit's `unknown`).

        Raises:
            OAuthError: `invalid_request` when no token is given.
        """
        token = present(form).get("token")
        if token is None:
            raise OAuthError("invalid_request", "token is required")
        digest = hash_token(token)
        held: str | None = ""
        if not await self._store.drop_token(digest):
            record = await self._store.refresh_record(digest, self._clock())
            used = await self._store.use_refresh(digest, self._clock())
            held = None
            if used is not None and record is not None:
                held = str(record["home"])
                await self._revoke_family(
                    used[0], record["home"], bytes.fromhex(record["agentKey"])
                )
        self._on_revoke()
        return held
