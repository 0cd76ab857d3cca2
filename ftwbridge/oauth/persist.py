"""Sign-in state in the store: consent requests, codes, claim offers (table `oauth_state`).

Codes live in the store only, in every mode: kept by their SHA-256 (the code itself is made
when it is delivered, `OAuthService.deliver`, and never stored), redeemed with a
compare-and-set (`OAuthStore.change_oauth_state`), so a code presented at two instances at
once is used once and the second is a replay.

One process on SQLite (no `database_url`): consent requests live in the memory of the process
and are written through as they change, then read back by `restore` at the next start; claim
offers belong to the door (`Door.claims`) and are written when the bridge stops (`save_claims`,
called by the drain) and loaded into the door at start.

Many instances on PostgreSQL (`shared`): the store is the truth for consent requests and claim
offers too. Each step reads the consent request from the store, always (one lookup by primary
key, about 0.5 ms; a copy in memory could not know what another instance changed), changes it
with a compare-and-set on its status, and a claim offer is written when the box offers it and
taken (deleted and returned) by whichever instance gets the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ftwbridge.door import Door

from .model import USED_CODE_KEEP_MS, CodeGrant, ConsentStatus, OAuthStore, Pending

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
        "source": p.source,
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
        status=ConsentStatus(r["status"]),
        redirect_given=bool(r["redirect_given"]),
        source=str(r.get("source", "")),
    )


def code_record(entry: CodeGrant) -> dict[str, Any]:
    """An issued code's grant as a JSON object (its consent request included)."""
    return {
        "pending": pending_record(entry.pending),
        "expires_at_ms": entry.expires_at_ms,
        "used": entry.used,
        "issued": [d.hex() for d in entry.issued],
        "family": entry.family,
        "replayed": entry.replayed,
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
        replayed=bool(r.get("replayed", False)),
    )


def consent_fields(changes: dict[str, Any]) -> dict[str, Any]:
    """Changes of a consent request's attributes as fields of its record (`pending_record`):
    an agent key as hex."""
    return {
        k: (v.hex() if k == "agent_key" and isinstance(v, bytes) else v) for k, v in changes.items()
    }


async def save_pending(store: OAuthStore, p: Pending) -> None:
    """Write consent request `p` as it now is (and mark it saved so)."""
    p.saved_status = p.status
    await store.put_oauth_state(CONSENT, p.id, pending_record(p), p.expires_at_ms)


class SavedSignIns:
    """Writing and restoring the sign-in state; `OAuthService` supplies the state."""

    _store: OAuthStore
    _door: Door
    _clock: Callable[[], int]
    _pending: dict[str, Pending]
    _shared: bool

    async def _save(self, p: Pending) -> None:
        """Write a consent request as it now is."""
        await save_pending(self._store, p)

    async def _unsave(self, p: Pending) -> None:
        await self._store.drop_oauth_state(CONSENT, p.id)

    async def _load(self, req: str) -> Pending | None:
        """The consent request `req` as the store has it now, or None (unknown, expired)."""
        found = await self._store.oauth_state(CONSENT, req, self._clock())
        if found is None:
            return None
        p = pending_from(found[0])
        p.saved_status = p.status
        return p

    async def _change(self, p: Pending, where: dict[str, Any], **changes: Any) -> bool:
        """Change consent request `p` if its fields are still `where` (compare-and-set):
        in the store when shared, else in memory (then written through). On success `p` has
        the changes; False when another step changed it first."""
        if self._shared:
            record = await self._store.change_oauth_state(
                CONSENT, p.id, consent_fields(changes), self._clock(), where=where
            )
            if record is None:
                return False
            fresh = pending_from(record)
            p.status, p.tries, p.home, p.agent_key = (
                fresh.status,
                fresh.tries,
                fresh.home,
                fresh.agent_key,
            )
            p.saved_status = p.status
            return True
        if any(getattr(p, k) != v for k, v in where.items()):
            return False
        for k, v in changes.items():
            setattr(p, k, ConsentStatus(v) if k == "status" else v)
        await self._save(p)
        return True

    async def _save_code(self, digest: bytes, entry: CodeGrant) -> None:
        """Write an issued code's grant, kept as long as a replay must still revoke."""
        until = entry.expires_at_ms + USED_CODE_KEEP_MS
        await self._store.put_oauth_state(CODE, digest.hex(), code_record(entry), until)

    async def restore(self) -> tuple[int, int, int]:
        """Load what the previous run left, on one process: consent requests and claim offers
        that have not expired (the expired ones are deleted); codes stay in the store, where
        they are redeemed. Call once, before serving. Shared (many instances): nothing to
        load, the store is the truth; returns zeros.

        Returns: how many (consent requests, live codes, claim offers) were restored.
        """
        if self._shared:
            return 0, 0, 0
        now = self._clock()
        for _, record, _ in await self._store.oauth_states(CONSENT, now):
            p = pending_from(record)
            p.saved_status = p.status
            self._pending[p.id] = p
        codes = 0
        for key, record, _ in await self._store.oauth_states(CODE, now):
            if code_from(record).pending.id in self._pending:  # an older bridge's code that
                await self._store.drop_oauth_state(CODE, key)  # never went out: delivered anew
                continue
            codes += 1
        claims = await self._store.oauth_states(CLAIM, now)
        for key, record, expires in claims:
            self._door.claims.setdefault(bytes.fromhex(key), (str(record["home"]), expires))
            await self._store.drop_oauth_state(CLAIM, key)  # used once; saved again at stop
        return len(self._pending), codes, len(claims)

    async def save_claims(self) -> int:
        """Write the door's open claim offers (the bridge is stopping); returns how many. When
        shared, the door holds none: each offer went to the store as it came."""
        now = self._clock()
        live = [(d, h, e) for d, (h, e) in self._door.claims.items() if e > now]
        for digest, home, expires in live:
            await self._store.put_oauth_state(CLAIM, digest.hex(), {"home": home}, expires)
        return len(live)
