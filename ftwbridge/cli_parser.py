"""The `ftwbridge` command line's grammar: every command, its options and their help
(`cli.py` reads the arguments and runs the command)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ftwbridge import __version__
from ftwbridge.cli_help import EXAMPLES, config_epilog

RAW = argparse.RawDescriptionHelpFormatter


def _wait_seconds(text: str) -> float:
    """`--wait`: a number of seconds, 0 or more (argparse says so in words otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < 366 * 86_400:
        raise argparse.ArgumentTypeError("give 0 or more seconds, at most a year")
    return value


def build_parser(description: str) -> argparse.ArgumentParser:
    """The parser of `ftwbridge`, its help opening with `description` (the usage summary)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, default=argparse.SUPPRESS, help="TOML config file")
    p = argparse.ArgumentParser(
        prog="ftwbridge", description=description, epilog=EXAMPLES, formatter_class=RAW
    )
    p.add_argument("--config", type=Path, default=None, help="TOML config file")
    p.add_argument("--version", action="version", version=f"ftwbridge {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_serving, _records, _configuration, _tokens, _store, _demo):
        add(sub, common)
    return p


def _serving(sub: Any, common: argparse.ArgumentParser) -> None:
    """`serve` and `keys`: the long-running processes."""
    serve = sub.add_parser("serve", help="run the bridge", parents=[common])
    serve.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="drain and exit when standard input closes (a parent passes a pipe it never writes)",
    )
    keys = sub.add_parser(
        "keys", help="run the keys part on a Unix socket or on TCP", parents=[common]
    )
    where = keys.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=Path, help="serve on this Unix socket (mode 0600)")
    where.add_argument(
        "--listen", metavar="HOST:PORT", help="serve bridge instances on TCP (needs mesh_key)"
    )


def _records(sub: Any, common: argparse.ArgumentParser) -> None:
    """`home` and `agent`: enrolled homes and their agents."""
    home = sub.add_parser("home", help="homes").add_subparsers(dest="action", required=True)
    enroll = home.add_parser("enroll", help="enroll a home's Ed25519 public key", parents=[common])
    enroll.add_argument("--home", required=True)
    enroll.add_argument("--key", required=True, help="32-byte public key, hex")
    home.add_parser("list", help="the enrolled homes and their rosters", parents=[common])
    agent = sub.add_parser("agent", help="agents").add_subparsers(dest="action", required=True)
    create = agent.add_parser(
        "create", help="make a new agent key (prints it, hex)", parents=[common]
    )
    create.add_argument("--home", required=True)
    agents = agent.add_parser("list", help="the agents a home's roster lists", parents=[common])
    agents.add_argument("--home", required=True)


def _configuration(sub: Any, common: argparse.ArgumentParser) -> None:
    """`config check` and `config sample`."""
    config = sub.add_parser(
        "config", help="the configuration", epilog=config_epilog(), formatter_class=RAW
    ).add_subparsers(dest="action", required=True)
    config.add_parser(
        "check",
        help="validate it and print the settings in effect (secrets masked)",
        parents=[common],
    )
    config.add_parser("sample", help="print a bridge.toml with every setting, commented")


def _tokens(sub: Any, common: argparse.ArgumentParser) -> None:
    """`token issue`: a development token for an agent the roster lists."""
    token = sub.add_parser("token", help="tokens").add_subparsers(dest="action", required=True)
    issue = token.add_parser(
        "issue", help="mint a token for an agent the roster lists", parents=[common]
    )
    issue.add_argument("--home", required=True)
    issue.add_argument("--agent", required=True, help="the agent's id in the home's roster")
    issue.add_argument(
        "--wait",
        type=_wait_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the owner to approve the agent at home (its roster to"
        " reach the bridge) instead of refusing at once",
    )


def _store(sub: Any, common: argparse.ArgumentParser) -> None:
    """`db`: migrate, back up, restore and import the store."""
    db = sub.add_parser("db", help="the store: migrate, import, back up, restore").add_subparsers(
        dest="action", required=True
    )
    db.add_parser(
        "migrate", help="apply the schema migrations database_url lacks", parents=[common]
    )
    backup = db.add_parser(
        "backup", help="copy the embedded state (online) into a new folder", parents=[common]
    )
    backup.add_argument("--to", type=Path, required=True, metavar="DIR", help="a new, empty folder")
    restore = db.add_parser(
        "restore", help="put a backup in place (the bridge stopped)", parents=[common]
    )
    restore.add_argument("--from", dest="source", type=Path, required=True, metavar="DIR")
    imp = db.add_parser(
        "import",
        help="copy a stopped embedded bridge's state into database_url (keys sealed under kek)",
        description=(
            "Copy the homes, rosters, access and refresh token hashes, OAuth clients and"
            " agents' keys of an embedded bridge (SQLite and agent-keys.json in its state"
            " folder) into the migrated PostgreSQL of database_url, sealing the keys under kek"
            " as keys services keep them. Run it with the keys service's configuration, the"
            " embedded bridge stopped. A second run copies nothing new; a roster already newer"
            " on PostgreSQL is kept. docs/operations.md, 'Moving from one process'."
        ),
        parents=[common],
    )
    imp.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="the embedded bridge's state folder (default: state_dir of the configuration)",
    )
    imp.add_argument(
        "--keys-file",
        type=Path,
        default=None,
        help="its agent keys file (default: agent-keys.json in that folder)",
    )
    imp.add_argument(
        "--dry-run", action="store_true", help="count what would be copied; change nothing"
    )


def _demo(sub: Any, common: argparse.ArgumentParser) -> None:
    """`demo`: a home, the bridge and an assistant reading it (`devtools`)."""
    demo = sub.add_parser(
        "demo", help="a home, the bridge and an assistant reading it", parents=[common]
    )
    demo.add_argument("--once", action="store_true", help="stop after the scripted session")
    demo.add_argument(
        "--port", type=int, default=None, help="HTTP port (default 8780, 0 with --once)"
    )
    demo.add_argument(
        "--state-dir", type=Path, default=None, help="keep state here (default: a temporary folder)"
    )
