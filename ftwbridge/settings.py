"""The settings as an operator reads them: each one's words, environment variable and default,
and the effective configuration with its secrets masked (`ftwbridge config check`).

The words are the docstrings written under each field of `Config` (config.py), read from its
source once, so the help, `config check` and the sample `bridge.toml` say what the code says.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import textwrap
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ftwbridge.config import ENV_PREFIX, SECRET_SETTINGS, Config

MASKED = ("mesh_key", "kek", "test_anonymous_token")
"""Settings shown only as set or unset: their whole value is a secret."""
MASK = "(set, hidden)"


@dataclass(frozen=True)
class Setting:
    """One field of `Config`: `name`, its variable `FTWBRIDGE_<NAME>`, the default as TOML
    text (None when it has none to write: unset), and its docstring (`words`)."""

    name: str
    variable: str
    default: str | None
    words: str

    @property
    def summary(self) -> str:
        """The first sentence of `words`, on one line."""
        flat = " ".join(self.words.split())
        return re.split(r"(?<=\.)\s", flat, maxsplit=1)[0].rstrip(";")


def toml_value(value: Any) -> str | None:
    """`value` written as TOML (None for None, which TOML cannot write: the setting is unset).
    Paths are strings, tuples arrays."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) or '""' for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these values


@cache
def settings() -> tuple[Setting, ...]:
    """Every setting of `Config`, in the order config.py declares them."""
    tree = ast.parse(inspect.getsource(Config))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    words: dict[str, str] = {}
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            doc = ""
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = inspect.cleandoc(str(after.value.value))
            words[node.target.id] = doc
    fields = Config.model_fields
    return tuple(
        Setting(
            name=name,
            variable=ENV_PREFIX + name.upper(),
            default=toml_value(fields[name].default),
            words=words.get(name, ""),
        )
        for name in fields
    )


def masked(name: str, value: Any) -> str | None:
    """`value` of setting `name` as TOML text with its secret hidden: the keys wholly, a
    database URL's password (`postgresql://bridge:***@db/bridge`)."""
    if value is None:
        return None
    if name in MASKED:
        return json.dumps(MASK)
    if name in SECRET_SETTINGS:
        value = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", str(value))
        value = re.sub(r"(password=)\S+", r"\1***", value)
    return toml_value(value)


def sources(path: Path | None, env: dict[str, str] | None = None) -> dict[str, str]:
    """Where each setting set outside the defaults came from: the variable (which wins) or the
    file. The file has already been read by `load_config`, so it parses here."""
    found: dict[str, str] = {}
    if path is not None:
        found |= dict.fromkeys(tomllib.loads(path.read_text("utf-8")), str(path))
    for variable in os.environ if env is None else env:
        if variable.startswith(ENV_PREFIX):
            found[variable[len(ENV_PREFIX) :].lower()] = variable
    return found


def effective(config: Config, path: Path | None, env: dict[str, str] | None = None) -> str:
    """The configuration in effect as TOML a file could hold, secrets masked, each line
    commented with where its value came from (the file, a variable, or the default)."""
    came = sources(path, env)
    lines = []
    for s in settings():
        value = masked(s.name, getattr(config, s.name))
        where = came.get(s.name, "default")
        if value is None:
            lines.append(f"# {s.name} is unset ({where})")
        else:
            lines.append(f"{s.name} = {value}  # {where}")
    return "\n".join(lines)


def settings_help() -> str:
    """Every setting with its variable and default, a line or two each (for `--help`)."""
    out = []
    for s in settings():
        default = "unset" if s.default is None else s.default
        words = textwrap.fill(s.summary, 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
        out.append(f"  {s.name}  ({s.variable}; default {default})\n{words}")
    return "\n".join(out)


async def check(config: Config, path: Path | None) -> int:
    """`ftwbridge config check`: the configuration loaded (`load_config` has said in one
    sentence what is wrong, if anything); print that it is valid, any warning about the URL
    the bridge would serve, and the effective settings with their secrets masked."""
    print(f"# the configuration is valid ({path or 'no file: defaults and environment'})")
    warning = config.url_warning()
    if warning is not None:
        print(f"# warning: {warning}")
    print(effective(config, path))
    return 0


SAMPLE_HEAD = """\
# ftwbridge's configuration: every setting, commented out at its default.
# Made by `ftwbridge config sample` from the settings' own descriptions (ftwbridge/config.py);
# tests/ops/test_deploy.py checks that this file is what that command prints, and loads.
# Each key may also be set by the environment variable FTWBRIDGE_<KEY>, which wins.
# `ftwbridge config check --config bridge.toml` shows what is in effect, secrets masked.
# docs/operations.md, "Configuration" and "Deploying", says more.
"""


def sample_toml() -> str:
    """A `bridge.toml` with every setting commented out at its default, each under its
    words: what `ftwbridge config sample` prints and `deploy/bridge.toml` holds."""
    out = [SAMPLE_HEAD]
    for s in settings():
        out.append("")
        out += [f"# {line}".rstrip() for line in textwrap.wrap(" ".join(s.words.split()), 94)]
        out.append(f"# {s.variable}")
        out.append(f"#{s.name} = {s.default}" if s.default is not None else f"#{s.name} =")
    return "\n".join(out) + "\n"


async def sample() -> int:
    """`ftwbridge config sample`: print `sample_toml()`."""
    print(sample_toml(), end="")
    return 0
