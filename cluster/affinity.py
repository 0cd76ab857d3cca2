"""HAProxy's lines that send a home's calls to the instance holding its uplink (docs/operations.md,
"Calls at the holder"), for `backend bridges` of `cluster.services.write_haproxy`.

A tagged access token (`ftwbridge.mcp.affinity`: `Bearer <12-character tag>.<secret>`) gives
the home's tag, `txn.home`. HAProxy keeps tag -> instance in a map (`MAP_FILE`, empty at its
start) learned from the `ftw-holder` header of the instances' answers (the instance that holds
the home names itself; a forwarded call's answer carries the holder's name back through the
entry), and sends a tagged call to the instance named there. A call with no tag, or a tag not
learned yet, or whose instance is down (HAProxy skips a `use-server` whose server is down),
goes round robin, and the entry forwards it to the holder, once: the hop is the fallback, and
the answer teaches the map. The map is written only when the answer names another instance than
the map did. The header is removed before the client sees it.

`MODES` are the three ways the bench compares (`bench/cluster_affinity.py`): `learned` (the
above, `make cluster`'s), `hash` (consistent hashing on the tag, which cannot follow the
uplinks: a box's upgrade request names no home) and `none` (round robin, as before tags).
"""

from __future__ import annotations

from pathlib import Path

from ftwbridge.mcp.affinity import HOLDER_HEADER, TAG_CHARS

MODES = ("learned", "hash", "none")
"""How `backend bridges` picks an instance for a call (module docstring)."""
MAP_FILE = "homes.map"
"""HAProxy's map of home tag -> instance id, in the run's folder (empty at the start)."""

TAG_VAR = (
    "    # the home's tag: the first 12 characters of a tagged bearer token (<tag>.<secret>)\n"
    '    http-request set-var(txn.home) "req.hdr(authorization),'
    f"regsub('^bearer +([A-Za-z0-9_-]{{{TAG_CHARS}}})[.].*','\\1','i')\""
    f" if {{ req.hdr(authorization) -m reg -i ^bearer\\ +[A-Za-z0-9_-]{{{TAG_CHARS}}}[.] }}\n"
)
"""Sets `txn.home` from a request whose one `Authorization` is a tagged bearer token."""


def balance(mode: str) -> str:
    """The `balance` of `backend bridges` in `mode` (`MODES`).

    Raises:
        ValueError: `mode` is not one of `MODES`.
    """
    if mode not in MODES:
        raise ValueError(f"affinity must be one of {', '.join(MODES)}, not {mode!r}")
    return "hash var(txn.home)\n    hash-type consistent" if mode == "hash" else "roundrobin"


def affinity_lines(mode: str, map_path: Path, servers: list[str]) -> str:
    """The lines of `backend bridges` that route by home in `mode` (`MODES`), for the
    instances named `servers` (each server's name is its instance's `instance_id`), with the
    learned map at `map_path`; every mode removes the holder's header from the answer.

    Raises:
        ValueError: `mode` is not one of `MODES`.
    """
    balance(mode)
    header = f"    http-response del-header {HOLDER_HEADER}\n"
    if mode == "none":
        return header
    if mode == "hash":
        return TAG_VAR + header
    lines = [
        TAG_VAR,
        "    # where its uplink is, as the instances' answers said (ftw-holder)\n",
        f"    http-request set-var(txn.held) var(txn.home),map({map_path})"
        " if { var(txn.home) -m found }\n",
        *(f"    use-server {s} if {{ var(txn.held) -m str {s} }}\n" for s in servers),
        f"    http-response set-map({map_path}) %[var(txn.home)] %[res.hdr({HOLDER_HEADER})]"
        f" if {{ var(txn.home) -m found }} {{ res.hdr({HOLDER_HEADER}) -m found }}"
        f" !{{ res.hdr({HOLDER_HEADER}),strcmp(txn.held) eq 0 }}\n",
        header,
    ]
    return "".join(lines)
