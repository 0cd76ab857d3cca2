"""The first answer given to each confirmation question, per assistant, so that an answer is
final (docs/control.md, "An answer is final"): after a decline the same state never acts.

Memory is bounded per assistant and in all, and the bounds fail closed: an answer forgotten
before its state expires makes that state, and every state of the same assistant that expires
no later, expire now (the person is asked again); it never turns a decline into consent. The
bounds are per assistant first, so one assistant that answers many questions forgets only its
own (no shared bound lets one assistant's traffic touch another's questions). No I/O, no
clock: times are the caller's, ms since the epoch.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, Literal

Answer = Literal["accept", "decline"]

MAX_PER_PRINCIPAL: Final = 256
"""Answered states remembered per assistant (home and agent key) until they expire."""
MAX_PRINCIPALS: Final = 10_000
"""Assistants with answered states remembered at once; past it the one answered least
recently is forgotten, its states made void."""


class FinalAnswers:
    """First answers by principal and question (`cmdId`), each kept until its state expires."""

    def __init__(
        self, *, per_principal: int = MAX_PER_PRINCIPAL, principals: int = MAX_PRINCIPALS
    ) -> None:
        self._per = per_principal
        self._most = principals
        self._books: OrderedDict[str, OrderedDict[str, tuple[Answer, int]]] = OrderedDict()
        self._void: dict[str, int] = {}

    def void_to(self, principal: str) -> int:
        """`principal`'s states expiring at or before this (ms) are void (0: none)."""
        return self._void.get(principal, 0)

    def settle(
        self, principal: str, question: str, given: Answer, *, expires_ms: int, now_ms: int
    ) -> Answer:
        """The final answer to `principal`'s `question`: the first given (`given` when this is
        the first, then kept until `expires_ms`)."""
        book = self._books.get(principal)
        if book is not None and question in book:
            return book[question][0]
        if book is None:
            book = self._books[principal] = OrderedDict()
        self._books.move_to_end(principal)
        while book:  # expired ones can no longer be opened: nothing to remember
            oldest = next(iter(book.values()))
            if oldest[1] > now_ms and len(book) < self._per:
                break
            self._forget(principal, book.popitem(last=False)[1][1], now_ms)
        book[question] = (given, expires_ms)
        while len(self._books) > self._most:
            gone, old = self._books.popitem(last=False)
            for _answer, expires in old.values():
                self._forget(gone, expires, now_ms)
        return given

    def _forget(self, principal: str, expires_ms: int, now_ms: int) -> None:
        """An answer of `principal` forgotten: void its states up to `expires_ms` if that is
        still to come; drop watermarks that have passed (nothing they void can open)."""
        if expires_ms > now_ms:
            self._void[principal] = max(self._void.get(principal, 0), expires_ms)
        if len(self._void) > self._most:
            self._void = {p: v for p, v in self._void.items() if v > now_ms}
