"""`make cluster`'s HAProxy rules that send a home's calls to its holder (`cluster/affinity.py`,
docs/operations.md "Calls at the holder"), over scripted instances: each answers as a bridge
instance does, naming in `ftw-holder` the instance that holds the token's home (where it holds
the home, or, as an entry that forwarded the call, from the holder's answer).

Pinned: a tagged token's calls go to the holder once an answer named it, whatever the
instance the first call entered; the scheme's case and extra spaces do not matter; a token
without a tag (minted before tags) is never learned and goes round robin; a home that moves is
followed after one call; an instance in maintenance is passed over; a client never sees the
header, and a client's own `ftw-holder` teaches HAProxy nothing. Skipped where HAProxy is not
installed (`make haproxy`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx2
import pytest
import trio

from cluster.affinity import MAP_FILE
from cluster.services import NO_HAPROXY, haproxy_command
from ftwbridge.mcp.affinity import HOLDER_HEADER, tag_of
from tests.cluster.test_haproxy import BOUND_S, META, Script, haproxy_over, read_request

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason=NO_HAPROXY)

NAMES = ["b1", "b2", "b3"]
HOME_A = "AAAAAAAAAAAA.secret-of-home-a"
HOME_B = "BBBBBBBBBBBB.secret-of-home-b"
OLD = "mXq0V1mXq0V1mXq0V1mXq0V1mXq0V1mXq0V1mXq0V1a"
"""A token minted before tags: 43 base64url characters."""


class Holders:
    """Where each home's uplink is (by tag), and who answered what."""

    def __init__(self) -> None:
        self.at: dict[str, str] = {"AAAAAAAAAAAA": "b2", "BBBBBBBBBBBB": "b3"}
        self.entered: list[tuple[str, str]] = []
        """(instance, token) per request an instance read."""

    async def serve(self, name: str, script: Script, stream: trio.SocketStream) -> None:
        """One connection of instance `name`: the answer names the home's holder."""
        async with stream:
            headers = await read_request(stream)
            if headers is None:
                return
            token = headers.get("authorization", "").split(" ")[-1]
            self.entered.append((name, token))
            tag = tag_of(token)
            named = b"" if tag is None else b"ftw-holder: %s\r\n" % self.at[tag].encode()
            body = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": false}}'
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + named
                + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body
            )


async def call(http: httpx2.AsyncClient, url: str, authorization: str, **extra: str) -> None:
    params = {"name": "status", "arguments": {}, "_meta": META}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    headers = {"mcp-method": "tools/call", "mcp-name": "status", "authorization": authorization}
    answer = await http.post(url, json=body, headers=headers | extra)
    assert answer.status_code == 200
    assert HOLDER_HEADER not in answer.headers  # HAProxy removed it


async def test_tagged_calls_go_to_the_holder_untagged_round_robin(tmp_path: Path) -> None:
    holders = Holders()
    with trio.fail_after(BOUND_S):
        async with (
            haproxy_over(tmp_path, NAMES, holders.serve) as (url, _script),
            httpx2.AsyncClient() as http,
        ):
            for auth in (f"Bearer {HOME_A}", f"bearer  {HOME_A}", f"BEARER {HOME_A}"):
                for _ in range(3):
                    await call(http, url, auth)
            for _ in range(6):
                await call(http, url, f"Bearer {OLD}", **{HOLDER_HEADER: "b1"})
            for _ in range(3):
                await call(http, url, f"Bearer {HOME_B}")
    a = [n for n, t in holders.entered if t == HOME_A]
    assert a[1:] == ["b2"] * 8, a  # the first entered anywhere; its answer taught the rest
    old = [n for n, t in holders.entered if t == OLD]
    assert set(old) == set(NAMES), old  # never learned: round robin, a client's header ignored
    b = [n for n, t in holders.entered if t == HOME_B]
    assert b[1:] == ["b3", "b3"], b
    learned = (tmp_path / MAP_FILE).read_text()
    assert learned == "", "what HAProxy learns stays in its memory, never in the file"


async def test_a_moved_home_is_followed_and_maintenance_passed_over(tmp_path: Path) -> None:
    holders = Holders()
    with trio.fail_after(BOUND_S):
        async with (
            haproxy_over(tmp_path, NAMES, holders.serve) as (url, _script),
            httpx2.AsyncClient() as http,
        ):
            for _ in range(2):
                await call(http, url, f"Bearer {HOME_A}")
            holders.at["AAAAAAAAAAAA"] = "b1"  # its box redialled and landed at b1
            for _ in range(3):
                await call(http, url, f"Bearer {HOME_A}")
            said = await haproxy_command(tmp_path, "set server bridges/b1 state maint")
            assert said == ""
            holders.at["AAAAAAAAAAAA"] = "b3"  # b1 is being restarted; the box is at b3
            for _ in range(3):
                await call(http, url, f"Bearer {HOME_A}")
    a = [n for n, _t in holders.entered]
    assert a[1:5] == ["b2", "b2", "b1", "b1"], a  # one call at the old holder, then the new
    assert a[5] != "b1" and a[6:] == ["b3", "b3"], a
