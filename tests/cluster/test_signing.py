"""The mesh's signatures, sans-I/O (docs/operations.md, "Trust across the internal hop"): what a forwarded request must carry,
and each way one is refused. Times are arguments here, so no clock is needed."""

from __future__ import annotations

import pytest

from ftwbridge.mesh import signing
from ftwbridge.mesh.signing import Checker, MeshRefused

KEY = bytes(range(32))
NOW = 1_800_000_000_000
BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


def _headers(**over: str) -> dict[str, list[str]]:
    made = signing.sign(
        KEY, sender="b-1", method="POST", path="/mcp", to="b-2", epoch=7, body=BODY, now_ms=NOW
    )
    made.update(over)
    return {k: [v] for k, v in made.items()}


def _refused(checker: Checker, headers: dict[str, list[str]], **kw: object) -> str:
    args: dict[str, object] = {"method": "POST", "path": "/mcp", "body": BODY, "now_ms": NOW}
    args.update(kw)
    with pytest.raises(MeshRefused) as err:
        checker.check(headers=headers, **args)  # type: ignore[arg-type]
    assert KEY.hex() not in err.value.words
    return err.value.reason


def test_a_signed_request_passes_once() -> None:
    checker = Checker(KEY, "b-2")
    headers = _headers()
    assert checker.check("POST", "/mcp", headers, BODY, NOW + 29_000) == signing.Signed("b-1", 7)
    assert _refused(checker, headers) == "replayed"


def test_every_part_of_the_request_is_covered() -> None:
    checker = Checker(KEY, "b-2")
    assert _refused(checker, _headers(), body=BODY + b" ") == "forged"
    assert _refused(checker, _headers(), method="GET") == "forged"
    assert _refused(checker, _headers(), path="/mcp/x") == "forged"
    assert _refused(checker, _headers(**{signing.TO: "b-2;8"})) == "forged"
    assert _refused(checker, _headers(**{signing.FROM: "b-3"})) == "forged"
    assert _refused(checker, _headers(**{signing.TS: str(NOW + 1)})) == "forged"
    assert _refused(checker, _headers(**{signing.NONCE: "0" * 32})) == "forged"
    assert _refused(Checker(bytes(32), "b-2"), _headers()) == "forged"


def test_unsigned_misaddressed_and_stale_requests_are_refused() -> None:
    checker = Checker(KEY, "b-2")
    assert _refused(checker, {}) == "unsigned"
    partial = _headers()
    del partial[signing.SIG]
    assert _refused(checker, partial) == "unsigned"
    assert _refused(checker, _headers(**{signing.SIG: "zz"})) == "unsigned"
    twice = _headers()
    twice[signing.SIG] = twice[signing.SIG] * 2
    assert _refused(checker, twice) == "unsigned"
    assert _refused(Checker(KEY, "b-3"), _headers()) == "misaddressed"
    assert _refused(checker, _headers(), now_ms=NOW + 30_001) == "stale"
    assert _refused(checker, _headers(), now_ms=NOW - 30_001) == "stale"


def test_nonces_are_forgotten_after_the_window_and_bounded() -> None:
    checker = Checker(KEY, "b-2", nonces_max=2)
    first = _headers()
    checker.check("POST", "/mcp", first, BODY, NOW)
    checker.check("POST", "/mcp", _headers(), BODY, NOW)
    assert _refused(checker, _headers()) == "busy"
    # a later request finds the old nonces aged out: room again, and the old one is stale
    later = signing.sign(
        KEY,
        sender="b-1",
        method="POST",
        path="/mcp",
        to="b-2",
        epoch=7,
        body=BODY,
        now_ms=NOW + 61_000,
    )
    hs = {k: [v] for k, v in later.items()}
    assert checker.check("POST", "/mcp", hs, BODY, NOW + 61_000).epoch == 7
    assert _refused(checker, first, now_ms=NOW + 61_000) == "stale"


@pytest.mark.parametrize("field", ["ts", "epoch"])
@pytest.mark.parametrize("digits", ["\xb2", "\u0663", "1" * 5000])
def test_a_time_or_epoch_not_in_ascii_digits_is_unsigned_not_a_crash(
    field: str, digits: str
) -> None:
    """Header values are Latin-1 text (byte 0xB2 is '²'); `str.isdigit` says yes to '²', to
    Arabic-Indic digits and to 5,000 digits, of which `int` refuses the first and the last
    (Python's 4,300-digit bound): a stranger's headers are refused in words, before any
    signature is worked out, never a ValueError out of the route."""
    headers = _headers()
    if field == "ts":
        headers[signing.TS] = [digits]
    else:
        headers[signing.TO] = [f"b-2;{digits}"]
    assert _refused(Checker(KEY, "b-2"), headers) == "unsigned"


SENT = [
    ("Authorization", "Bearer agent-one"),
    ("Content-Type", "application/json"),
    ("Mcp-Method", "tools/call"),
    ("Mcp-Name", "status"),
    ("accept", "application/json"),
    ("accept", "text/event-stream"),
]


def _covering(**over: list[str]) -> dict[str, list[str]]:
    made = signing.sign(
        KEY,
        sender="b-1",
        method="POST",
        path="/mcp",
        to="b-2",
        epoch=7,
        body=BODY,
        now_ms=NOW,
        headers=SENT,
    )
    headers: dict[str, list[str]] = {k: [v] for k, v in made.items()}
    for name, value in SENT:
        headers.setdefault(name.lower(), []).append(value)
    headers.update(over)
    return {k: v for k, v in headers.items() if v}


def test_every_header_the_holder_reads_is_covered() -> None:
    """A header changed, added to or dropped from the covered ones is `forged`; the holder
    gets the covered headers only, so one added on the way is never read."""
    checker = Checker(KEY, "b-2")
    for change in (
        {"authorization": ["Bearer agent-two"]},
        {"mcp-name": ["ev_charge_now"]},
        {"mcp-method": ["tools/list"]},
        {"content-type": ["text/plain"]},
        {"accept": ["application/json"]},
        {"accept": ["text/event-stream", "application/json"]},
        {"authorization": []},
        {"mcp-name": ["status", "ev_charge_now"]},
        {signing.COVERED: ["accept,authorization,content-type,mcp-method"]},
        {signing.COVERED: ["accept,authorization,content-type,mcp-method,mcp-name,origin"]},
    ):
        assert _refused(checker, _covering(**change)) == "forged", change
    passed = checker.check(
        "POST", "/mcp", _covering(**{"x-forwarded-for": ["6.6.6.6"], "origin": ["e"]}), BODY, NOW
    )
    assert passed.headers == {
        "authorization": ["Bearer agent-one"],
        "content-type": ["application/json"],
        "mcp-method": ["tools/call"],
        "mcp-name": ["status"],
        "accept": ["application/json", "text/event-stream"],
    }
    for bad in ("Authorization ,x", "ftw-mesh-sig", "a b"):
        assert _refused(checker, _covering(**{signing.COVERED: [bad]})) == "unsigned", bad
    with pytest.raises(ValueError):
        signing.sign(
            KEY,
            sender="b",
            method="POST",
            path="/",
            to="c",
            epoch=1,
            body=b"",
            now_ms=NOW,
            headers=[("ftw-mesh-sig", "x")],
        )


def test_the_forwarded_token_digest_is_signed_and_malformed_ones_refused() -> None:
    digest = bytes(range(32))
    made = signing.sign(
        KEY,
        sender="b-1",
        method="POST",
        path="/mcp",
        to="b-2",
        epoch=7,
        body=BODY,
        now_ms=NOW,
        token_digest=digest,
    )
    headers = {k: [v] for k, v in made.items()}
    assert (
        Checker(KEY, "b-2").check("POST", "/mcp", dict(headers), BODY, NOW).token_digest == digest
    )
    swapped = headers | {signing.TOKEN: [bytes(32).hex()]}
    assert _refused(Checker(KEY, "b-2"), swapped) == "forged"
    dropped = {k: v for k, v in headers.items() if k != signing.TOKEN}
    assert _refused(Checker(KEY, "b-2"), dropped) == "forged"
    for bad in (["zz"], [digest.hex(), digest.hex()]):
        assert _refused(Checker(KEY, "b-2"), headers | {signing.TOKEN: bad}) == "unsigned"


def test_the_signed_text_keeps_its_bytes() -> None:
    """The bytes the HMAC covers, pinned: instances of one cluster sign and check each other's
    requests, so a rewrite of `signed_text` must leave them as they are."""
    import hashlib

    text = signing.signed_text(
        sender="b-1",
        method="post",
        path="/mcp",
        ts_ms=1_800_000_000_000,
        to="b-2",
        epoch=7,
        nonce="0" * 32,
        body='{"a":"é"}'.encode(),
        headers={
            "accept": ["application/json", "text/event-stream"],
            "content-type": ["application/json"],
            "x-u": ['café "q"'],
        },
        token_digest=bytes(range(32)),
    )
    assert text.startswith(b"ftwbridge-mesh-v2\nb-1\nPOST\n/mcp\n1800000000000\nb-2\n7\n")
    assert hashlib.sha256(text).hexdigest() == (
        "f302fdb724f432d10942b4f80a1fd60940c21b4415af18a848118bc36b0b9b8e"
    )


def test_the_signed_text_is_the_same_as_with_the_json_module() -> None:
    """`signed_text` writes its header block without `json.dumps`: the same bytes for every
    kind of value a header may carry (quotes, backslashes, controls, Latin-1, none at all)."""
    import hashlib
    import json

    values = ['a"b\\c', "\t x \x7f", "ÿé\x80", "", "\x01\x1f", "plain"]
    headers = {"accept": values, "x-empty": [], "content-type": ["application/json"]}
    text = signing.signed_text(
        sender="b-1", method="POST", path="/mcp", ts_ms=1, to="b-2", epoch=1,
        nonce="0" * 32, body=b"", headers=headers,
    )  # fmt: skip
    block = json.dumps([[n, headers[n]] for n in sorted(headers)], separators=(",", ":"))
    assert text.split(b"\n")[10] == hashlib.sha256(block.encode()).hexdigest().encode()
