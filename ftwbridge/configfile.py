"""How a configuration's faults read: the TOML file read in words, the nearest known setting
for a misspelt key, and pydantic's errors as one sentence for the operator that names where
each setting came from and never repeats a secret (docs/operations.md, "Configuration")."""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

import pydantic

ENV_PREFIX = "FTWBRIDGE_"
"""Every setting's environment variable is this and its name in upper case."""


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one sentence naming where the
    setting came from (the file, or the `FTWBRIDGE_*` variable) and what to change."""


SECRET_SETTINGS = ("database_url", "mesh_key", "kek")
"""Settings whose value may hold a password: an error about one never repeats it."""


def read_toml(path: Path) -> dict[str, Any]:
    """The file's TOML as a table.

    Raises:
        ConfigError: the file is missing, a folder, unreadable, or not TOML (with the line
            and column).
    """
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"the config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"the config file {path} is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"the config file {path} cannot be read: {why}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's message ends "(at line L, column C)" (or "(at end of document)").
        where = re.search(r"\(at (line \d+, column \d+|end of document)\)", str(exc))
        what = re.sub(r"\s*\(at [^)]*\)$", "", str(exc))
        at = f" at {where.group(1)}" if where else ""
        raise ConfigError(f"{path} is not valid TOML{at}: {what[:1].lower()}{what[1:]}") from None


def nearest(key: str, names: list[str], *, env: bool = False) -> str:
    """ "; did you mean ...?" naming the closest of the settings `names` (as a variable when
    `env`), else a pointer to the documented keys."""
    close = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.6)
    if not close:
        return "; see the configuration keys in docs/operations.md"
    return (
        f"; did you mean {ENV_PREFIX + close[0].upper()}?"
        if env
        else f"; did you mean {close[0]!r}?"
    )


def one_sentence(exc: pydantic.ValidationError, origin: dict[str, str], path: Path | None) -> str:
    """pydantic's errors as one sentence: each setting, its source, what it must be."""
    parts = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        msg = str(error["msg"]).removeprefix("Value error, ")
        msg = re.sub(r"^Input should be", "must be", msg)
        shown = "(got " in msg or not key or key in SECRET_SETTINGS
        got = "" if shown else f" (got {error['input']!r})"
        if key:
            source = origin.get(key) or (str(path) if path else "the defaults")
            parts.append(f"{key} {msg}{got} in {source}")
        else:  # a rule across settings: the message names them
            parts.append(msg)
    return "; ".join(parts)
