"""`ftwbridge` command line: the only reader of argv and the environment.

ftwbridge serve [--config FILE]             run the bridge
ftwbridge keys --socket PATH [--config FILE] run the keys part as its own process
ftwbridge home enroll --home H --key HEX     enroll a home's Ed25519 public key
ftwbridge token issue --home H --agent A     mint a development token for a listed agent
ftwbridge demo [--once] [--port N]          a home, the bridge and an assistant reading it
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from pathlib import Path

import trio

from ftwbridge.config import Config, load_config
from ftwbridge.keys import KeysService, serve_keys
from ftwbridge.proto.roster import RosterRefused, verify_roster
from ftwbridge.run import Bridge, wall_ms
from ftwbridge.store import SqliteStore, TokenRecord, hash_token


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ftwbridge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", type=Path, default=None, help="TOML config file")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the bridge")
    keys = sub.add_parser("keys", help="run the keys part on a Unix socket")
    keys.add_argument("--socket", type=Path, required=True)
    home = sub.add_parser("home", help="homes").add_subparsers(dest="action", required=True)
    enroll = home.add_parser("enroll", help="enroll a home's Ed25519 public key")
    enroll.add_argument("--home", required=True)
    enroll.add_argument("--key", required=True, help="32-byte public key, hex")
    token = sub.add_parser("token", help="tokens").add_subparsers(dest="action", required=True)
    issue = token.add_parser("issue", help="mint a development token for an agent the roster lists")
    issue.add_argument("--home", required=True)
    issue.add_argument("--agent", required=True, help="the agent's id in the home's roster")
    demo = sub.add_parser("demo", help="a home, the bridge and an assistant reading it")
    demo.add_argument("--once", action="store_true", help="stop after the scripted session")
    demo.add_argument(
        "--port", type=int, default=None, help="HTTP port (default 8780, 0 with --once)"
    )
    demo.add_argument(
        "--state-dir", type=Path, default=None, help="keep state here (default: a temporary folder)"
    )
    return p


async def _serve(config: Config) -> int:
    """Serve until SIGTERM or SIGINT: the first drains and exits 0, a second exits at once (1)."""
    bridge = Bridge(config)
    status = 0
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.serve)
            print(f"ftwbridge serving {bridge.site.resource}", flush=True)

            async def watch() -> None:
                nonlocal status
                draining = False
                async for _sig in signals:
                    if draining:
                        status = 1
                        nursery.cancel_scope.cancel()
                        return
                    draining = True
                    nursery.start_soon(drain_then_stop)

            async def drain_then_stop() -> None:
                await bridge.drain()
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
    return status


async def _keys(config: Config, socket: Path) -> None:
    service = KeysService(Path(config.state_dir) / "agent-keys.json")
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_keys, socket, service)
        print(f"keys part on {socket}", flush=True)


async def _enroll(config: Config, home: str, key_hex: str) -> int:
    key = bytes.fromhex(key_hex)
    if len(key) != 32:
        print("the key must be 32 bytes of hex", file=sys.stderr)
        return 2
    store = SqliteStore(Path(config.state_dir) / "bridge.sqlite")
    await store.enroll_home(home, key)
    store.close()
    print(f"enrolled {home}")
    return 0


async def _issue(config: Config, home: str, agent: str) -> int:
    store = SqliteStore(Path(config.state_dir) / "bridge.sqlite")
    try:
        held, key = await store.roster(home), await store.home_key(home)
        if held is None or key is None:
            print(f"no roster is held for {home}", file=sys.stderr)
            return 1
        try:
            roster = verify_roster(held[1], home_key=key, home=home)
        except RosterRefused as exc:
            print(f"the held roster does not verify: {exc}", file=sys.stderr)
            return 1
        for agent_key, grant in roster.agents().items():
            if grant.id == agent:
                bridge = Bridge(config)
                token = await bridge.issue_token(home, agent_key, agent, grant.scopes)
                bridge.store.close()
                print(token)
                return 0
        print(f"the roster of {home} lists no agent {agent}", file=sys.stderr)
        return 1
    finally:
        store.close()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `ftwbridge` command."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.command == "serve" else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(message)s",
    )
    config = load_config(args.config)
    status = 0
    with contextlib.suppress(KeyboardInterrupt):
        if args.command == "serve":
            status = trio.run(_serve, config)
        elif args.command == "keys":
            trio.run(_keys, config, args.socket)
        elif args.command == "home":
            status = trio.run(_enroll, config, args.home, args.key)
        elif args.command == "token":
            status = trio.run(_issue, config, args.home, args.agent)
        elif args.command == "demo":
            from ftwbridge.demo import run_demo

            port = args.port if args.port is not None else (0 if args.once else 8780)
            status = trio.run(lambda: run_demo(once=args.once, port=port, state_dir=args.state_dir))
    sys.exit(status)


__all__ = ["TokenRecord", "hash_token", "main", "wall_ms"]
