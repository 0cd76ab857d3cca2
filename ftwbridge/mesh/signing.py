"""Signing and checking forwarded requests, sans-I/O (docs/operations.md, "Trust across
the internal hop").

The sender adds six headers to the request it forwards:

- `ftw-mesh-from`: the sender's instance id;
- `ftw-mesh-to`: `<instance>;<epoch>`, the holder the sender looked up and its claim's epoch;
- `ftw-mesh-ts`: the sender's wall clock, ms since the Unix epoch;
- `ftw-mesh-nonce`: 16 random bytes, hex;
- `ftw-mesh-signed`: the names (lower case, comma-separated, sorted) of every other header it
  sends on, each covered by the signature with all its values (`Authorization`, `Mcp-*`,
  `Content-Type`, `Accept`, ...);
- `ftw-mesh-sig`: HMAC-SHA256 (RFC 2104) under `mesh_key` over the lines of `signed_text`,
  hex;
- and, on a forwarded `/mcp` call, `ftw-mesh-token`: the SHA-256 (hex) of the bearer token
  the sender verified, sent in place of its `Authorization` header: the token itself never
  crosses the hop, and its digest opens nothing but a signed request (the store keeps the
  same digest, never the token).

The receiver refuses, in that order: a request without them (`unsigned`), with a signature
that does not match (`forged`: any covered header, the body, the method or the path changed),
addressed to another instance (`misaddressed`), whose time is more than `WINDOW_MS` from its
own (`stale`), or whose nonce it has seen within the window (`replayed`). What passes gives
the covered headers only (`Signed.headers`): the holder reads no header the sender did not
sign, so one added or changed on the way is never acted on. Nothing here does I/O or reads a
clock: times come in as arguments.
"""

from __future__ import annotations

import hashlib
import hmac
import json.encoder
import re
import secrets
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FROM = "ftw-mesh-from"
TO = "ftw-mesh-to"
TS = "ftw-mesh-ts"
NONCE = "ftw-mesh-nonce"
COVERED = "ftw-mesh-signed"
SIG = "ftw-mesh-sig"
HEADERS = (FROM, TO, TS, NONCE, COVERED, SIG)
"""The mesh's own headers, each once on every signed request: set by the sender, never
passed on from a client."""
TOKEN = "ftw-mesh-token"
"""The forwarded token's SHA-256, hex (optional; at most once)."""
WINDOW_MS = 30_000
"""How far a forwarded request's time may be from the receiver's, ms."""
NONCES_MAX = 100_000
"""Nonces remembered at most; past it new requests are refused (`busy`) until old ones age
out of the window: about 3,300 forwarded requests a second held for 30 s."""
DOMAIN = b"ftwbridge-mesh-v2"
"""The first line of every signed text, so a signature made for anything else never fits
(v1 signed no header: an instance of v1 and one of v2 refuse each other's requests as
`forged`)."""
MAX_COVERED = 64
"""Headers one request may cover at most."""

_quoted = json.encoder.encode_basestring_ascii
"""A string as JSON writes it with `ensure_ascii` (quoted, escaped)."""
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_NONCE = re.compile(r"[0-9a-f]{32}")
_SIG = re.compile(r"[0-9a-f]{64}")
_NAME = r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}"
"""A header name as RFC 9110 section 5.1 allows it (a token), in lower case."""
_NAMES = re.compile(f"{_NAME}(?:,{_NAME})*")
"""Such names, comma-separated."""
_COUNT = re.compile(r"[0-9]{1,18}")
"""A time (ms) or an epoch: ASCII digits only (`str.isdigit` also takes '²', which `int`
refuses), and few enough to fit a PostgreSQL BIGINT."""


@dataclass(frozen=True, slots=True)
class Signed:
    """What a checked request says of itself: the `sender` instance, and the `epoch` of the
    claim the sender believed this instance holds the home at."""

    sender: str
    epoch: int
    headers: dict[str, list[str]] = field(default_factory=dict)
    token_digest: bytes | None = None
    """The SHA-256 of the bearer token the sender verified, in place of the token; None when
    it forwarded none."""
    """The covered headers (lower-case name -> every value, in order): the only ones the
    holder reads."""


class MeshRefused(Exception):
    """A forwarded request the internal listener refuses.

    Attributes:
        reason: `unsigned`, `forged`, `misaddressed`, `stale`, `replayed` or `busy` (the
            metric's label).
        words: one sentence for the log and the answer; it never repeats the key or a
            signature.
    """

    def __init__(self, reason: str, words: str) -> None:
        super().__init__(words)
        self.reason = reason
        self.words = words


def signed_text(
    *,
    sender: str,
    method: str,
    path: str,
    ts_ms: int,
    to: str,
    epoch: int,
    nonce: str,
    body: bytes,
    headers: Mapping[str, list[str]] | None = None,
    token_digest: bytes | None = None,
) -> bytes:
    """The bytes the HMAC covers: `DOMAIN`, then one line each for the sender, the method,
    the path, the time (ms), the target instance, its epoch, the nonce, the body's SHA-256 in
    hex, the covered headers' names (sorted, comma-separated), the SHA-256 of those
    headers as canonical JSON (`[[name, [value, ...]], ...]` in name order), and the
    forwarded token's digest in hex ("" when none)."""
    covered = headers or {}
    names = sorted(covered)
    # the block as `json.dumps(..., separators=(",", ":"))` writes it (ASCII, each string
    # escaped by the encoder's own C function), without building an encoder per call
    rows = ",".join(f"[{_quoted(n)},[{','.join(map(_quoted, covered[n]))}]]" for n in names)
    block = f"[{rows}]"
    lines = (
        sender,
        method.upper(),
        path,
        str(ts_ms),
        to,
        str(epoch),
        nonce,
        hashlib.sha256(body).hexdigest(),
        ",".join(names),
        hashlib.sha256(block.encode()).hexdigest(),
        "" if token_digest is None else token_digest.hex(),
    )
    return DOMAIN + ("\n" + "\n".join(lines)).encode()


def sign(
    key: bytes,
    *,
    sender: str,
    method: str,
    path: str,
    to: str,
    epoch: int,
    body: bytes,
    now_ms: int,
    headers: Iterable[tuple[str, str]] = (),
    token_digest: bytes | None = None,
) -> dict[str, str]:
    """The mesh headers for a request from `sender` to instance `to` at `epoch` that sends on
    `headers` (name, value) pairs; every one of them is covered.

    Args:
        key: the 32-byte `mesh_key`.
        now_ms: the sender's wall clock, ms since the Unix epoch.
        headers: the other headers sent, in the order sent (names in any case).
        token_digest: the SHA-256 (32 bytes) of the bearer token forwarded in its place.

    Returns:
        header name -> value, the six of `HEADERS` (and `TOKEN` with a digest).

    Raises:
        ValueError: a header name that is not a token, one of the mesh's own, or more than
            `MAX_COVERED` names.
    """
    covered = _covering(headers)
    nonce = secrets.token_hex(16)
    text = signed_text(
        sender=sender,
        method=method,
        path=path,
        ts_ms=now_ms,
        to=to,
        epoch=epoch,
        nonce=nonce,
        body=body,
        headers=covered,
        token_digest=token_digest,
    )
    made = {
        FROM: sender,
        TO: f"{to};{epoch}",
        TS: str(now_ms),
        NONCE: nonce,
        COVERED: ",".join(sorted(covered)),
        SIG: hmac.digest(key, text, "sha256").hex(),
    }
    if token_digest is not None:
        made[TOKEN] = token_digest.hex()
    return made


def _covering(headers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """`headers` (name, value) pairs as the covered map: lower-case name -> values in order.

    Raises:
        ValueError: a name that is not a token or is the mesh's own, or too many names.
    """
    covered: dict[str, list[str]] = {}
    for name, value in headers:
        covered.setdefault(name.lower(), []).append(value)
    if len(covered) > MAX_COVERED:
        raise ValueError(f"more than {MAX_COVERED} headers to cover")
    listed = ",".join(covered)
    if covered and (not _names_ok(listed) or listed.count(",") != len(covered) - 1):
        bad = next(n for n in covered if not _names_ok(n) or "," in n)  # one pass, then this
        raise ValueError(f"header {bad!r} cannot be covered")
    return covered


def _names_ok(listed: str) -> bool:
    """Whether `listed` is comma-separated header names, each a lower-case token
    (`_NAME`) and none the mesh's own."""
    return bool(_NAMES.fullmatch(listed)) and not ("," + listed).count(",ftw-mesh-")


def _received(
    headers: Mapping[str, list[str]], listed: str
) -> tuple[dict[str, list[str]], bytes | None]:
    """The covered headers `listed` names (`COVERED`'s value) as received, and the forwarded
    token's digest, if any.

    Raises:
        MeshRefused: `unsigned`, when the list or the digest is not well formed.
    """
    names = listed.split(",") if listed else []
    if len(names) > MAX_COVERED or (names and not _names_ok(listed)):
        raise MeshRefused("unsigned", "the request's covered headers are not well formed")
    tokens = [t.strip() for t in headers.get(TOKEN, [])]
    if len(tokens) > 1 or not all(_SIG.fullmatch(t) for t in tokens):
        raise MeshRefused("unsigned", f"the request's {TOKEN} header is not well formed")
    return {n: list(headers.get(n, [])) for n in names}, (
        bytes.fromhex(tokens[0]) if tokens else None
    )


def _mesh_headers(headers: Mapping[str, list[str]]) -> tuple[dict[str, str], str, str]:
    """The mesh headers, each once and well formed: (their values by name, the addressee,
    its epoch as digits).

    Raises:
        MeshRefused: `unsigned`, a header missing, repeated or not well formed.
    """
    values = {}
    for name in HEADERS:
        got = headers.get(name, [])
        if len(got) != 1:
            raise MeshRefused("unsigned", f"the request has no single {name} header")
        values[name] = got[0].strip()
    to, _, epoch_text = values[TO].partition(";")
    if not (
        _ID.fullmatch(values[FROM])
        and _ID.fullmatch(to)
        and _COUNT.fullmatch(epoch_text)
        and _COUNT.fullmatch(values[TS])
        and _NONCE.fullmatch(values[NONCE])
        and _SIG.fullmatch(values[SIG])
    ):
        raise MeshRefused("unsigned", "the request's mesh headers are not well formed")
    return values, to, epoch_text


class Checker:
    """The receiving side: checks forwarded requests addressed to `instance_id` and remembers
    their nonces for `WINDOW_MS`.

    Args:
        key: the 32-byte `mesh_key`.
        instance_id: this instance's id; a request addressed to another is refused.
        window_ms: how far a request's time may be from `now_ms`, either way.
        nonces_max: nonces remembered at most (`NONCES_MAX`).
    """

    def __init__(
        self,
        key: bytes,
        instance_id: str,
        *,
        window_ms: int = WINDOW_MS,
        nonces_max: int = NONCES_MAX,
    ) -> None:
        self._key = key
        self._me = instance_id
        self._window_ms = window_ms
        self._max = nonces_max
        self._seen: set[str] = set()
        self._order: deque[tuple[int, str]] = deque()

    def check(
        self,
        method: str,
        path: str,
        headers: Mapping[str, list[str]],
        body: bytes,
        now_ms: int,
    ) -> Signed:
        """Check one request (`headers`: lower-case name -> every value) at `now_ms`, and
        remember its nonce.

        Raises:
            MeshRefused: unsigned, forged, misaddressed, stale, replayed or busy (see the
                module's docstring for the order).
        """
        values, to, epoch_text = _mesh_headers(headers)
        covered, digest = _received(headers, values[COVERED])
        ts_ms, epoch = int(values[TS]), int(epoch_text)
        text = signed_text(
            sender=values[FROM],
            method=method,
            path=path,
            ts_ms=ts_ms,
            to=to,
            epoch=epoch,
            nonce=values[NONCE],
            body=body,
            headers=covered,
            token_digest=digest,
        )
        want = hmac.digest(self._key, text, "sha256").hex()
        if not hmac.compare_digest(want, values[SIG]):
            raise MeshRefused("forged", "the request's signature does not match (another key?)")
        if to != self._me:
            raise MeshRefused("misaddressed", f"the request is addressed to {to}, not here")
        if abs(now_ms - ts_ms) > self._window_ms:
            raise MeshRefused(
                "stale",
                f"the request's time is {(now_ms - ts_ms) / 1000:+.1f} s from this instance's,"
                f" more than {self._window_ms / 1000:g} s (clocks apart, or a replay)",
            )
        self._forget(now_ms)
        if values[NONCE] in self._seen:
            raise MeshRefused("replayed", "the request was received before (a replay)")
        if len(self._seen) >= self._max:
            raise MeshRefused("busy", "too many forwarded requests within the window")
        self._seen.add(values[NONCE])
        self._order.append((max(ts_ms, now_ms) + self._window_ms, values[NONCE]))
        return Signed(values[FROM], epoch, {n: v for n, v in covered.items() if v}, digest)

    def _forget(self, now_ms: int) -> None:
        """Drop the nonces whose requests could no longer pass the window. Entries are kept
        in arrival order; an expiry out of order only keeps a nonce a little longer."""
        while self._order and self._order[0][0] < now_ms:
            self._seen.discard(self._order.popleft()[1])
