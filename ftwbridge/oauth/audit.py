"""What each step of a sign-in leaves behind: one audit line (logger `ftwbridge.audit`) and
one metric sample (`ftwbridge_signin_steps_total{step, outcome}`), refusals included
(docs/operations.md, "Audit log"). Never a token, a code or a claim code: the line names the
step, its outcome, the client, the home and the client address key.

Steps (`STEPS`) and outcomes: `ok` (or the step's own word: `asked`, `approved`, `denied`,
`unknown`), `rate_limited` for a 429 of the sign-in limits, `unavailable` for a database or
keys part that does not answer, `wrong_code`, or the RFC 6749 error code of the refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ftwbridge.proto.clean import clean
from ftwbridge.store import StoreError

from .model import OAuthError

audit = logging.getLogger("ftwbridge.audit")

STEPS = {
    "register": "a client registration (RFC 7591, `/oauth/register`)",
    "consent": "a consent request opened (`GET /authorize`)",
    "claim": "a claim code typed (`POST /authorize`): `asked` when right, `wrong_code` if not",
    "home": "the home's owner answered: `approved` (a roster lists the agent) or `denied`",
    "exchange": "an authorization code exchanged for tokens (`/oauth/token`)",
    "refresh": "a refresh token used (`/oauth/token`)",
    "revoke": "a revocation (RFC 7009, `/oauth/revoke`): `ok`, or `unknown` for a token not held",
}
"""The sign-in steps audited (the `signin` field of the line, the `step` label)."""


def safe(text: object) -> str:
    """A value for one audit field: cleaned, no whitespace, at most 80 characters, `-` if
    empty."""
    words = clean(str(text)).split()
    return "_".join(words)[:80] or "-"


def outcome_of(exc: BaseException) -> str:
    """The audit outcome of a step that raised `exc`."""
    if isinstance(exc, OAuthError):
        if exc.outcome is not None:
            return exc.outcome
        if exc.status == 429:
            return "rate_limited"
        return "unavailable" if exc.status == 503 else exc.error
    if isinstance(exc, StoreError):
        return "unavailable"
    return "error" if isinstance(exc, Exception) else "cancelled"


@dataclass(slots=True)
class Step:
    """One step's line, filled in as the step goes."""

    name: str
    outcome: str = "ok"
    client: str = "-"
    home: str = "-"
    source: str = "-"


class SignInAudit:
    """Writes each sign-in step's audit line and counts it.

    Args:
        on_step: told (step, outcome) after each step (the metric), if given.
    """

    def __init__(self, on_step: Callable[[str, str], None] | None = None) -> None:
        self.on_step = on_step

    def record(self, step: Step) -> None:
        """One step's audit line and metric sample."""
        audit.info(
            "signin=%s status=%s client=%s home=%s source=%s",
            step.name,
            step.outcome,
            safe(step.client),
            safe(step.home),
            safe(step.source),
        )
        if self.on_step is not None:
            self.on_step(step.name, step.outcome)

    @contextmanager
    def step(
        self, name: str, *, client: str = "-", home: str = "-", source: str = "-"
    ) -> Iterator[Step]:
        """Audit the `with` block as step `name`: its outcome is `ok` unless the block sets
        another, or raises (`outcome_of`; the exception goes on its way)."""
        seen = Step(name, client=client, home=home, source=source)
        try:
            yield seen
        except BaseException as exc:
            seen.outcome = outcome_of(exc)
            raise
        finally:
            self.record(seen)
