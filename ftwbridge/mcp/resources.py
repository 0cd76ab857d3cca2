"""The home as MCP resources: URIs, templates, and which tool answers each (PROTOCOL.md part D,
"Resources and prompts"; docs/resources.md).

Every resource of a token is under `ftw://home/{home}/`, `{home}` being the token's home id
percent-encoded as one path segment (RFC 3986 section 2.1, every reserved character encoded).
Each resource or template names the tool whose box read answers it, so a read is the tool's
own read with the tool's own cleaned JSON, and a token sees only what its scopes let it call.
This module decides, without I/O, what is listed and what a URI means; `mcp/catalog.py` runs
the tool.

A URI is accepted only in the form this module writes: printable ASCII, no fragment, each path
segment of unreserved and sub-delimiter characters or `%XX` escapes (RFC 3986 section 3.3), a
query only where a template declares one, each query key at most once. Anything else, and
another home's URI, is unknown: the caller answers -32602 with `data.uri` (MCP 2026-07-28
resources, "Error Handling") and reads nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote, unquote

from mcp_types import Resource, ResourceTemplate

from .control_tools import CONTROL_BY_NAME
from .tools import TOOLS_BY_NAME

PREFIX: Final = "ftw://home/"
JSON_MIME: Final = "application/json"
MAX_URI_ECHO: Final = 2048
"""The most characters of a refused URI echoed back in `data.uri`."""
_SEGMENT: Final = re.compile(r"^(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+$")
_QUERY_PART: Final = re.compile(r"^(?:[A-Za-z0-9\-._~!$'()*+,;:@/?]|%[0-9A-Fa-f]{2})*$")


def tool_scopes(tool: str) -> frozenset[str] | None:
    """The scopes a token needs to call `tool` (a read or a control tool), or None when the
    bridge has no such tool (yet: a tool another part adds later)."""
    spec = TOOLS_BY_NAME.get(tool) or CONTROL_BY_NAME.get(tool)
    return None if spec is None else frozenset(s.value for s in spec.scopes)


def may_use(tool: str, scopes: tuple[str, ...] | frozenset[str]) -> bool:
    """Whether `tool` exists and a token with `scopes` holds every scope it needs."""
    need = tool_scopes(tool)
    return need is not None and need <= set(scopes)


def home_base(home: str) -> str:
    """`ftw://home/{home}/` for `home`, the id percent-encoded as one segment."""
    return f"{PREFIX}{quote(home, safe='')}/"


@dataclass(frozen=True, slots=True)
class HomeResource:
    """One fixed resource of a home: `ftw://home/{home}/{path}`, answered by `tool` called
    with `args`; a client may cache a read for `ttl_ms` (MCP 2026-07-28 caching)."""

    path: str
    tool: str
    title: str
    description: str
    ttl_ms: int
    args: Mapping[str, Any] = field(default_factory=dict)

    def listing(self, home: str) -> Resource:
        """The entry of `resources/list` for `home`."""
        return Resource(
            uri=home_base(home) + self.path,
            name=self.path,
            title=self.title,
            description=self.description,
            mime_type=JSON_MIME,
        )


Match = Callable[[list[str], dict[str, str]], dict[str, Any] | None]
"""(the path segments after the template's first, the query) -> the tool's arguments, or None
when the URI does not fit the template."""


@dataclass(frozen=True, slots=True)
class HomeTemplate:
    """A resource template of a home (RFC 6570): `ftw://home/{home}/{template}`, its first
    segment `name`; `match` turns a URI's variables into `tool`'s arguments."""

    name: str
    template: str
    tool: str
    title: str
    description: str
    ttl_ms: int
    query_keys: frozenset[str]
    match: Match

    def listing(self, home: str) -> ResourceTemplate:
        """The entry of `resources/templates/list` for `home`."""
        return ResourceTemplate(
            uri_template=home_base(home) + self.template,
            name=self.name,
            title=self.title,
            description=self.description,
            mime_type=JSON_MIME,
        )


def _one(key: str) -> Match:
    """A template with one variable, the one segment after its name, as argument `key`."""
    return lambda rest, query: {key: rest[0]} if len(rest) == 1 else None


def _history(rest: list[str], query: dict[str, str]) -> dict[str, Any] | None:
    """`history/{range}{?series,points}`: `series` a comma-separated list (RFC 6570 section
    3.2.8, a list not exploded), `points` a whole number in digits."""
    if len(rest) != 1:
        return None
    args: dict[str, Any] = {"range": rest[0]}
    if "series" in query:
        args["series"] = query["series"].split(",")
    if "points" in query:
        points = query["points"]
        if not (points.isascii() and points.isdigit()) or len(points) > 9:
            return None
        args["points"] = int(points)
    return args


RESOURCES: Final[tuple[HomeResource, ...]] = (
    # `live` is answered by the `status` read; the live feed of PROTOCOL.md part F may answer
    # it without a box read where one is fresh.
    HomeResource("live", "status", "Live status", TOOLS_BY_NAME["status"].description, 5_000),
    HomeResource(
        "chargers",
        "chargers_list",
        "EV chargers",
        TOOLS_BY_NAME["chargers_list"].description,
        10_000,
    ),
    HomeResource("cars", "cars_list", "Cars", TOOLS_BY_NAME["cars_list"].description, 60_000),
    HomeResource("plan", "plan_get", "Battery plan", TOOLS_BY_NAME["plan_get"].description, 60_000),
    HomeResource("health", "health_get", "Health", TOOLS_BY_NAME["health_get"].description, 60_000),
    HomeResource(
        "grant",
        "homes_list",
        "This assistant's grant",
        TOOLS_BY_NAME["homes_list"].description + " Answered by the bridge (no box read).",
        0,
    ),
)
"""The fixed resources of every home, in listing order."""

TEMPLATES: Final[tuple[HomeTemplate, ...]] = (
    HomeTemplate(
        "history",
        "history/{range}{?series,points}",
        "history_query",
        "History",
        TOOLS_BY_NAME["history_query"].description
        + " range: a number and h or d (6h, 24h, 7d); series: comma-separated names.",
        60_000,
        frozenset({"series", "points"}),
        _history,
    ),
    HomeTemplate(
        "config",
        "config/{section}",
        "config_get",
        "Configuration",
        TOOLS_BY_NAME["config_get"].description
        + " section: site, battery, loadpoints, tariff or planner.",
        60_000,
        frozenset(),
        _one("section"),
    ),
    # The energy report's template: listed and read once the `energy_report` tool exists
    # (`may_use` is false for a tool the bridge does not have).
    HomeTemplate(
        "energy",
        "energy/{period}",
        "energy_report",
        "Energy report",
        "Energy in kWh and money per period (day, week or month), this one against the one"
        " before (the energy_report tool).",
        60_000,
        frozenset(),
        _one("period"),
    ),
)
"""The resource templates of every home, in listing order."""

_FIXED: Final = {r.path: r for r in RESOURCES}
_TEMPLATED: Final = {t.name: t for t in TEMPLATES}


@dataclass(frozen=True, slots=True)
class Target:
    """What a URI reads: `tool` called with `args`, cacheable for `ttl_ms`; `name` is the
    resource's path or template after the home (short, and free of the client's text)."""

    name: str
    tool: str
    args: dict[str, Any]
    ttl_ms: int


def listed(home: str, scopes: tuple[str, ...]) -> list[Resource]:
    """The resources a token of `home` with `scopes` may read."""
    return [r.listing(home) for r in RESOURCES if may_use(r.tool, scopes)]


def listed_templates(home: str, scopes: tuple[str, ...]) -> list[ResourceTemplate]:
    """The resource templates a token of `home` with `scopes` may read."""
    return [t.listing(home) for t in TEMPLATES if may_use(t.tool, scopes)]


def _decode(segment: str) -> str | None:
    if not _SEGMENT.fullmatch(segment):
        return None
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        return None


def _query(text: str, allowed: frozenset[str]) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for part in text.split("&"):
        key, eq, value = part.partition("=")
        if not eq or key not in allowed or key in out or not _QUERY_PART.fullmatch(value):
            return None
        try:
            out[key] = unquote(value, errors="strict")
        except UnicodeDecodeError:
            return None
    return out


def resolve(uri: str, home: str) -> Target | None:
    """What `uri` reads for a token of `home`, or None when it is not one of that home's
    resources (unknown, malformed, or another home's: the caller cannot tell them apart)."""
    if not (uri.startswith(PREFIX) and uri.isascii() and uri.isprintable()) or "#" in uri:
        return None
    path, has_query, query_text = uri[len(PREFIX) :].partition("?")
    segments = path.split("/")
    decoded = [_decode(s) for s in segments]
    if len(segments) < 2 or None in decoded or decoded[0] != home:
        return None
    first, rest = segments[1], [d for d in decoded[2:] if d is not None]
    if first in _FIXED and len(segments) == 2 and not has_query:
        fixed = _FIXED[first]
        return Target(fixed.path, fixed.tool, dict(fixed.args), fixed.ttl_ms)
    template = _TEMPLATED.get(first)
    if template is None or (has_query and not template.query_keys):
        return None
    query = _query(query_text, template.query_keys) if has_query else {}
    args = None if query is None else template.match(rest, query)
    return None if args is None else Target(template.template, template.tool, args, template.ttl_ms)


def echo(uri: str) -> str:
    """A refused URI as `data.uri` carries it (cut to `MAX_URI_ECHO` characters)."""
    return uri[:MAX_URI_ECHO]
