"""`make soak` (`python -m soak.run`): the bridge on loopback under load and faults.

What runs: `ftwbridge serve` (its own process, state in a fresh folder), stub homes (four in a
process each, so a signal hits one home; eight in one `--fleet` process; one slow home with
`--delay-ms`), three agents granted at each home by its owner, and load at `--rate` calls a
second over real HTTP to `/mcp` with a tool mix, agents in turn. Then each scenario of
`soak.faults.SCENARIOS` in order: the fault under load, the load stopped, the bridge given
`SETTLE_S` to come back to rest, and the invariants checked (`soak/report.py`). One table at
the end; exit status 1 if any cell is not `ok`.

Bounded: every wait has a bound, the default run takes about three minutes on a 2-core
machine (`--scale 3` or `SOAK_SCALE=3` for a longer one), everything is on 127.0.0.1, and
every process it starts ends with it (killed or not: they watch its pipe).
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

from . import report
from .faults import BY_NAME, SCENARIOS, Scenario
from .rig import Options, Soak, open_rig


async def run_scenario(soak: Soak, scenario: Scenario) -> report.Row:
    """Run one scenario under load; returns its row of invariants."""
    failed = ""
    if soak.bridge.running != soak.bridge.config(**scenario.config):
        try:
            await soak.restart_bridge(**scenario.config)
        except Exception as exc:  # the row says so, and the checks show what was left
            failed = f"restarting the bridge: {type(exc).__name__}: {exc}"[:120]
    soak.scenario = scenario.name
    soak.marks = soak.bridge.log_marks()
    first = len(soak.load.calls)
    before, pid = await soak.bridge.metrics(), soak.bridge.pid
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(soak.load.run, scenario.name, stop, soak.fleet.load_homes)
        try:
            effect = await scenario.run(soak)
        except Exception as exc:  # the row says what broke; the next scenario goes on
            effect = f"{type(exc).__name__}: {exc}"[:120]
        finally:
            stop.set()
    if failed:
        effect = failed if effect == "ok" else f"{failed}; {effect}"
    settled = await soak.settle()
    counted: dict[str, float] = {}
    if not settled.down:
        after = await soak.bridge.metrics()
        counted = report.counted(after if soak.bridge.pid != pid else report.minus(after, before))
    return report.row(soak, soak.load.calls[first:], settled, effect, counted)


async def soak(options: Options, names: list[str], *, verbose: bool = False) -> list[report.Row]:
    """Set up, run the scenarios `names` in order, tear down; returns their rows."""
    chosen = [BY_NAME[n] for n in names]
    if not any(sc.slow_home for sc in chosen):
        options.slow_ms = None
    rows: list[report.Row] = []
    async with open_rig(options) as rig:
        print(
            f"soak: {len(rig.fleet.homes)} homes, {options.agents} agents each,"
            f" {options.rate_per_s:g} calls/s; baseline {rig.baseline_fds} fds,"
            f" {rig.baseline_rss / report.MIB:.0f} MiB",
            flush=True,
        )
        for scenario in chosen:
            print(f"soak: {scenario.name}: {scenario.what}", flush=True)
            rows.append(await run_scenario(rig, scenario))
            if verbose:
                print(report.details(rows[-1:]), flush=True)
    return rows


def _only_interrupts(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    return isinstance(exc, BaseExceptionGroup) and all(_only_interrupts(e) for e in exc.exceptions)


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m soak.run`."""
    p = argparse.ArgumentParser(prog="python -m soak.run", description=__doc__)
    p.add_argument(
        "--scale",
        type=float,
        default=float(os.environ.get("SOAK_SCALE", "1")),
        help="multiply every scenario's duration and counts (default $SOAK_SCALE or 1)",
    )
    p.add_argument("--rate", type=float, default=6.0, help="calls started per second")
    p.add_argument("--solo", type=int, default=4, help="homes in a process each (at least 2)")
    p.add_argument("--fleet", type=int, default=8, help="homes in one --fleet process")
    p.add_argument("--agents", type=int, default=3, help="agents per home")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument(
        "--scenarios",
        default=",".join(sc.name for sc in SCENARIOS),
        help="comma-separated, in order (default: all)",
    )
    p.add_argument("--keep", action="store_true", help="keep the state and logs folder")
    p.add_argument("--verbose", action="store_true", help="what was heard and logged, per scenario")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or args.solo < 2:
        p.error(f"unknown scenarios {unknown}" if unknown else "--solo must be 2 or more")
    options = Options(
        scale=args.scale,
        rate_per_s=args.rate,
        solo=args.solo,
        fleet=args.fleet,
        agents=args.agents,
        seed=args.seed,
        keep=args.keep,
    )
    try:
        rows = trio.run(lambda: soak(options, names, verbose=args.verbose))
    except BaseException as exc:
        if not _only_interrupts(exc):
            raise
        print("\nsoak: interrupted; every process it started has been stopped", file=sys.stderr)
        sys.exit(130)
    print()
    print(report.table(rows))
    failed = [r.scenario for r in rows if not r.ok]
    print(f"\nsoak: {'FAILED: ' + ', '.join(failed) if failed else 'every invariant held'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
