"""The transport under the hop channel's TLS (`mesh/records.py`): it hands the bytes up no
further than each TLS record's end, however they were cut by the reads, and counts what it
holds back. Real TLS over it: `tests/cluster/test_channel.py`."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ftwbridge.mesh.records import RecordStream


def _record(kind: int, fragment: bytes) -> bytes:
    return bytes([kind, 3, 3]) + len(fragment).to_bytes(2, "big") + fragment


RECORDS = [_record(22, b"h" * 40), _record(23, b""), _record(23, b"a" * 300), _record(21, b"zz")]
WIRE = b"".join(RECORDS)


@pytest.mark.parametrize("cuts", [[len(WIRE)], [1] * len(WIRE), [3, 2, 44, 7, 300, 6]])
async def test_each_record_is_handed_up_alone_however_the_reads_cut_it(cuts: list[int]) -> None:
    near, far = trio.testing.memory_stream_pair()
    records = RecordStream(near)
    with trio.fail_after(10):
        got: list[bytes] = []
        pos = 0
        for cut in cuts:
            await far.send_all(WIRE[pos : pos + cut])
            pos += cut
            while records.held or not got or sum(map(len, got)) < pos:
                got.append(await records.receive_some())
        ends = {0}
        for record in RECORDS:
            ends.add(max(ends) + len(record))
        at = 0
        for piece in got:  # no piece crosses a record's end
            assert piece
            assert not any(at < end < at + len(piece) for end in ends)
            at += len(piece)
        assert b"".join(got) == WIRE
        await far.send_eof()
        assert await records.receive_some() == b""


async def test_what_comes_past_a_record_is_held_and_counted() -> None:
    near, far = trio.testing.memory_stream_pair()
    records = RecordStream(near)
    with trio.fail_after(10):
        await far.send_all(RECORDS[2] + RECORDS[3])
        assert await records.receive_some() == RECORDS[2]
        assert records.held == len(RECORDS[3])
        assert await records.receive_some(3) == RECORDS[3][:3]
        assert records.held == len(RECORDS[3]) - 3
        assert await records.receive_some() == RECORDS[3][3:]
        assert records.held == 0
        await records.send_all(b"out")
        assert await far.receive_some() == b"out"
        await records.aclose()
