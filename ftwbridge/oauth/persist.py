"""Sign-in state that survives a restart of the bridge: consent requests, codes, claim offers.

Consent requests and codes are written to the store as they change (`OAuthStore.
put_oauth_state`) and read back by `restore` when the bridge starts; what expired meanwhile is
deleted on load. Codes are kept by their SHA-256 only: a request that was approved but whose
code had not yet gone to the client gets a new code at restore. Claim offers belong to the door
(`Door.claims`); they are written when the bridge stops (`save_claims`, called by the drain)
and loaded into the door at start, so a home's code still works after a planned restart.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from ftwbridge.door import Door

from .model import CODE_TTL_MS, USED_CODE_KEEP_MS, CodeGrant, OAuthStore, Pending, token_hash

CONSENT, CODE, CLAIM = "consent", "code", "claim"


def pending_record(p: Pending) -> dict[str, Any]:
    """A consent request as a JSON object (no code: codes are kept by hash only)."""
    return {
        "id": p.id,
        "client_id": p.client_id,
        "client_name": p.client_name,
        "redirect_uri": p.redirect_uri,
        "state": p.state,
        "challenge": p.challenge,
        "scopes": list(p.scopes),
        "csrf": p.csrf,
        "expires_at_ms": p.expires_at_ms,
        "tries": p.tries,
        "home": p.home,
        "agent_key": None if p.agent_key is None else p.agent_key.hex(),
        "status": p.status,
        "redirect_given": p.redirect_given,
    }


def pending_from(r: dict[str, Any]) -> Pending:
    """The consent request `pending_record` wrote.

    Raises:
        KeyError, TypeError, ValueError: a record this module did not write.
    """
    return Pending(
        str(r["id"]),
        str(r["client_id"]),
        str(r["client_name"]),
        str(r["redirect_uri"]),
        None if r["state"] is None else str(r["state"]),
        str(r["challenge"]),
        tuple(str(s) for s in r["scopes"]),
        str(r["csrf"]),
        int(r["expires_at_ms"]),
        tries=int(r["tries"]),
        home=None if r["home"] is None else str(r["home"]),
        agent_key=None if r["agent_key"] is None else bytes.fromhex(r["agent_key"]),
        status=str(r["status"]),
        redirect_given=bool(r["redirect_given"]),
    )


def code_record(entry: CodeGrant) -> dict[str, Any]:
    """An issued code's grant as a JSON object (its consent request included)."""
    return {
        "pending": pending_record(entry.pending),
        "expires_at_ms": entry.expires_at_ms,
        "used": entry.used,
        "issued": [d.hex() for d in entry.issued],
        "family": entry.family,
    }


def code_from(r: dict[str, Any]) -> CodeGrant:
    """The code grant `code_record` wrote.

    Raises:
        KeyError, TypeError, ValueError: a record this module did not write.
    """
    return CodeGrant(
        pending_from(r["pending"]),
        int(r["expires_at_ms"]),
        used=bool(r["used"]),
        issued=[bytes.fromhex(d) for d in r["issued"]],
        family=str(r["family"]),
    )


class SavedSignIns:
    """Writing and restoring the sign-in state; `OAuthService` supplies the state."""

    _store: OAuthStore
    _door: Door
    _clock: Callable[[], int]
    _pending: dict[str, Pending]
    _codes: dict[bytes, CodeGrant]

    async def _save(self, p: Pending) -> None:
        """Write a consent request as it now is."""
        p.saved_status = p.status
        await self._store.put_oauth_state(CONSENT, p.id, pending_record(p), p.expires_at_ms)

    async def _unsave(self, p: Pending) -> None:
        await self._store.drop_oauth_state(CONSENT, p.id)

    async def _save_code(self, digest: bytes, entry: CodeGrant) -> None:
        """Write an issued code's grant, kept as long as a replay must still revoke."""
        until = entry.expires_at_ms + USED_CODE_KEEP_MS
        await self._store.put_oauth_state(CODE, digest.hex(), code_record(entry), until)

    async def _unsave_code(self, digest: bytes) -> None:
        await self._store.drop_oauth_state(CODE, digest.hex())

    async def restore(self) -> tuple[int, int, int]:
        """Load what the previous run left: consent requests, codes and claim offers that have
        not expired (the expired ones are deleted). A request approved before the restart whose
        code never reached its client gets a new code. Call once, before serving.

        Returns: how many (consent requests, codes, claim offers) were restored.
        """
        now = self._clock()
        for _, record, _ in await self._store.oauth_states(CONSENT, now):
            p = pending_from(record)
            p.saved_status = p.status
            self._pending[p.id] = p
        codes = 0
        for key, record, _ in await self._store.oauth_states(CODE, now):
            entry = code_from(record)
            if entry.pending.id in self._pending:  # its code never went out: a new one below
                await self._store.drop_oauth_state(CODE, key)
                continue
            self._codes[bytes.fromhex(key)] = entry
            codes += 1
        for p in self._pending.values():
            if p.status == "approved":
                p.code = secrets.token_urlsafe(32)
                entry = CodeGrant(p, now + CODE_TTL_MS)
                self._codes[token_hash(p.code)] = entry
                await self._save_code(token_hash(p.code), entry)
                codes += 1
        claims = await self._store.oauth_states(CLAIM, now)
        for key, record, expires in claims:
            self._door.claims.setdefault(bytes.fromhex(key), (str(record["home"]), expires))
            await self._store.drop_oauth_state(CLAIM, key)  # used once; saved again at stop
        return len(self._pending), codes, len(claims)

    async def save_claims(self) -> int:
        """Write the door's open claim offers (the bridge is stopping); returns how many."""
        now = self._clock()
        live = [(d, h, e) for d, (h, e) in self._door.claims.items() if e > now]
        for digest, home, expires in live:
            await self._store.put_oauth_state(CLAIM, digest.hex(), {"home": home}, expires)
        return len(live)
