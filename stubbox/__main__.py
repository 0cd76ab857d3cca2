"""`python -m stubbox`: a simulated home that dials a bridge's door and serves its console.

`--tz` names the box's IANA time zone (default Europe/Stockholm), where its energy buckets
start (PROTOCOL.md part G; `hello_ok.box.tz`, `config site.timezone`).

Readings move every second as a real meter's do: seeded wiggles on the simulation's 5-minute
slots (stubbox/flicker.py), from `--sim-seed` and each home's name, so a run repeats and the
homes of a `--fleet` move apart. `--still` gives the slots' own values, which hold for five
minutes (tests and benchmarks that want exact values).

On start it prints one JSON line: `{"home", "homeKey" (hex Ed25519 public key), "console"
(port)}`, or with `--fleet N`, `{"fleet": [{"home", "homeKey"}, ...], "console"}`, so a parent
process (the demo, tests, benchmarks) can enroll the homes and drive their owners.
`--print-key` prints that line and exits without dialing.

State: without `--state` a home lives in memory and a restart begins again at roster seq 1
with no agents, which a bridge holding a newer roster refuses. With `--state DIR` each home
keeps its owner's newest signed roster, the assistants waiting for an answer, the goal
requests of the last 30 days and the mode and car targets the owner approved in
`DIR/<home>.json` (one file per home of a `--fleet`; public data and roster rows only, the
keys derive from `--seed`), written atomically before the bridge hears of a change. A restart
with the same `--state` and `--seed` sends the kept roster when the uplink comes up (its Noise
key as kept, whatever `--no-noise` says), and the owner's next roster has the next seq. A
file that cannot be read or used stops the start with one sentence on stderr naming it and
what to do (exit 2); see stubbox/state.py.

Stopping: the first SIGTERM or SIGINT closes every uplink with a Close frame (1001, going away)
and exits within `STOP_S`, whatever the stub is doing (dialling, backing off, answering); a
second signal exits at once. With `--exit-with-parent`, the stub also exits when its standard
input reaches end-of-file: a parent that starts it with a pipe there (and never writes) takes it
along when it dies, even by SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import zoneinfo
from pathlib import Path
from urllib.parse import urlsplit

import trio

from ftwbridge.lifecycle import until_stdin_closes

from .console import ConsoleError, serve_console
from .dial import run_uplink
from .home import DEFAULT_TZ
from .state import StateError, state_path
from .uplink import StubHome

STOP_S = 1.0
"""The most a stop takes from the first signal (seconds); uplinks close within it."""


def _zone(name: str) -> str:
    """An IANA time zone name this machine knows (argparse says so in words otherwise)."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(f"not a time zone this machine knows: {name!r}") from None
    return name


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m stubbox", description=__doc__)
    p.add_argument(
        "--bridge",
        default="ws://127.0.0.1:8780/v1/box",
        help="the door URL, or several separated by commas, tried in turn",
    )
    p.add_argument("--home", default="demo-home")
    p.add_argument("--seed", default="demo", help="text the home's keys derive from")
    p.add_argument("--sim-seed", type=int, default=1, help="seed of the simulated site")
    p.add_argument("--tz", type=_zone, default=DEFAULT_TZ, help="the box's IANA time zone")
    p.add_argument(
        "--still",
        action="store_true",
        help="readings hold each 5-minute slot's value (no per-second meter flicker)",
    )
    p.add_argument("--console", type=int, default=0, help="console port on 127.0.0.1 (0 picks)")
    p.add_argument("--clock", choices=["ntp", "rtc", "none"], default="ntp")
    p.add_argument("--no-noise", action="store_true", help="a box that takes no assistants yet")
    p.add_argument("--hostile", action="store_true", help="hidden characters in names and logs")
    p.add_argument("--delay-ms", type=int, default=0, help="how long each read takes")
    p.add_argument("--frozen-ms", type=int, default=None, help="answer as at this time (tests)")
    p.add_argument(
        "--approve-all",
        action="store_true",
        help="the owner approves every assistant and every goal request",
    )
    p.add_argument(
        "--no-read-limit", action="store_true", help="benchmarks only: lift 60 reads/min"
    )
    p.add_argument(
        "--stagger-s",
        type=float,
        default=0.0,
        help="benchmarks only: spread a fleet's uptimes over S seconds, so their pulses are spread",
    )
    p.add_argument("--fleet", type=int, default=1, help="run N homes named HOME-0 .. HOME-(N-1)")
    p.add_argument("--print-key", action="store_true", help="print the home key line and exit")
    p.add_argument(
        "--state",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each home's signed roster in DIR/<home>.json across restarts",
    )
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when standard input closes (a parent passes a pipe it never writes)",
    )
    return p


async def _stop(stubs: dict[str, StubHome], nursery: trio.Nursery) -> None:
    """Close every uplink with a Close frame (bounded by `STOP_S`), then end everything."""
    for stub in stubs.values():
        stub.stopping = True  # no redial from here on
    with trio.move_on_after(STOP_S):
        async with trio.open_nursery() as closing:
            for stub in stubs.values():
                closing.start_soon(stub.drop_uplink)
    nursery.cancel_scope.cancel()


async def _main(args: argparse.Namespace) -> None:
    names = [args.home] if args.fleet <= 1 else [f"{args.home}-{i}" for i in range(args.fleet)]
    stubs: dict[str, StubHome] = {}
    for i, name in enumerate(names):
        stub = StubHome(
            name,
            seed=args.seed if len(names) == 1 else name,
            sim_seed=args.sim_seed,
            noise=not args.no_noise,
            clock_source=args.clock,
            hostile=args.hostile,
            answer_delay_ms=args.delay_ms,
            read_limit=not args.no_read_limit,
            tz=args.tz,
            still=args.still,
        )
        stub.box.frozen_ms = args.frozen_ms
        stub.started -= i * args.stagger_s / len(names)  # as if booted earlier: pulses spread
        stub.approve_all = args.approve_all
        stubs[name] = stub
    keys = [{"home": s.home, "homeKey": s.owner.home_public_key.hex()} for s in stubs.values()]
    line: dict[str, object] = dict(keys[0]) if len(keys) == 1 else {"fleet": keys}
    if args.print_key:
        print(json.dumps(line), flush=True)
        return
    if args.state is not None:
        for stub in stubs.values():
            await stub.keep_state(state_path(args.state, stub.home))
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_console, stubs, args.console)
            print(json.dumps(line | {"console": port}), flush=True)
            for stub in stubs.values():
                nursery.start_soon(run_uplink, stub, args.bridge)
            if args.exit_with_parent:

                async def orphaned() -> None:
                    await until_stdin_closes()
                    await _stop(stubs, nursery)

                nursery.start_soon(orphaned)
            stopping = False
            async for _sig in signals:
                if stopping:  # a second signal: at once
                    os._exit(130)
                stopping = True
                nursery.start_soon(_stop, stubs, nursery)
                nursery.cancel_scope.deadline = trio.current_time() + STOP_S * 2


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m stubbox`."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.state is not None and args.state.exists() and not args.state.is_dir():
        print(
            f"stubbox: --state {args.state} is not a folder; name a folder (made if missing)",
            file=sys.stderr,
        )
        sys.exit(2)
    doors = [u.strip() for u in args.bridge.split(",") if u.strip()]
    wrong = [u for u in doors if urlsplit(u).scheme not in ("ws", "wss") or not urlsplit(u).netloc]
    if not doors or wrong:
        print(
            f"stubbox: --bridge {wrong[0] if wrong else repr(args.bridge)} is not a door URL;"
            " give ws://host:port/v1/box (or wss://), several separated by commas",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        trio.run(_main, args)
    except* (StateError, ConsoleError) as group:  # raised at start: one sentence, exit 2
        print(f"stubbox: {group.exceptions[0]}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
