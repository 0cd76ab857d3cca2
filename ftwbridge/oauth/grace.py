"""The refresh grace window: parallel refreshes of one refresh token get one new pair.

An editor that opens several tabs, or a client that retries after a lost response, sends the
same refresh token more than once within a moment. Strict rotation (OAuth 2.1 section 4.3.1)
would treat the second use as theft and revoke the whole grant, including the pair just issued.
RFC 9700 section 4.14.2 allows the trade-off made here: every refresh of one token that arrives
within `grace_ms` of its first use receives the answer of that first use (the same access and
refresh token), and a use after the window still revokes the family. The price: whoever replays
a stolen refresh token within the window receives the same pair as its owner. The window closes
early once the new refresh token is used, since its owner then evidently holds the new pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from .model import OAuthError


@dataclass(slots=True, eq=False)
class Rotation:
    """One refresh token's first use: its deadline for repeats (ms since the epoch), and once
    done, the answer or the error every repeat within the window receives."""

    until_ms: int
    family: str = ""
    answer: dict[str, Any] | None = None
    error: OAuthError | None = None
    child: bytes = b""
    done: trio.Event = field(default_factory=trio.Event)

    def succeed(self, answer: dict[str, Any], child: bytes) -> None:
        """The first use issued `answer`; `child` is the SHA-256 of its new refresh token."""
        self.answer, self.child = answer, child
        self.done.set()

    def fail(self, error: OAuthError) -> None:
        """The first use failed with `error`; repeats within the window hear the same."""
        self.error = error
        self.done.set()

    async def outcome(self) -> dict[str, Any]:
        """The first use's answer, once it has one (a repeat waits for it).

        Raises:
            OAuthError: the first use's error.
        """
        await self.done.wait()
        if self.answer is None:
            error = self.error or OAuthError("server_error", "the refresh did not complete", 500)
            raise OAuthError(error.error, error.description, error.status)
        return self.answer


class Rotations:
    """First uses of refresh tokens (by SHA-256), kept `grace_ms` each.

    Args:
        grace_ms: the window, ms; 0 turns it off (every repeat revokes, strict rotation).
    """

    def __init__(self, grace_ms: int) -> None:
        self._grace_ms = grace_ms
        self._by_token: dict[bytes, Rotation] = {}

    def get(self, digest: bytes, now_ms: int) -> Rotation | None:
        """The first use of `digest` if its window is still open at `now_ms`."""
        rotation = self._by_token.get(digest)
        return rotation if rotation is not None and now_ms < rotation.until_ms else None

    def begin(self, digest: bytes, now_ms: int) -> Rotation:
        """Record the first use of `digest`. Using a token that an earlier rotation issued
        closes that rotation's window (its owner holds the new pair)."""
        for parent, rotation in list(self._by_token.items()):
            if rotation.child == digest:
                del self._by_token[parent]
        rotation = Rotation(now_ms + self._grace_ms)
        if self._grace_ms > 0:
            self._by_token[digest] = rotation
        return rotation

    def name_family(self, digest: bytes, family: str) -> None:
        """Note the family of the token whose first use is under way (for `drop_family`)."""
        rotation = self._by_token.get(digest)
        if rotation is not None:
            rotation.family = family

    def drop_family(self, family: str) -> None:
        """The family was revoked: repeats no longer receive its pairs."""
        for digest in [d for d, r in self._by_token.items() if r.family == family]:
            del self._by_token[digest]

    def purge(self, now_ms: int) -> None:
        """Forget the first uses whose window has closed (the answers hold live tokens)."""
        for digest in [d for d, r in self._by_token.items() if r.until_ms <= now_ms]:
            del self._by_token[digest]

    def __len__(self) -> int:
        return len(self._by_token)
