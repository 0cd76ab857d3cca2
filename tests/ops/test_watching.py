"""Watching a bridge: the standard process, platform and GC series, `ftwbridge_build_info`, no
`_created` series, the shipped Grafana dashboard and Prometheus alert rules naming only series
a live `/metrics` has, and the admin listener's read-only status page."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
import yaml

from ftwbridge import __version__
from ftwbridge.status import SAMPLE_S, Status
from tests.e2e.env import REAL_WAIT_S, Env

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "ftwbridge-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "ftwbridge-alerts.yml"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every target, never on `/metrics`."""
SERIES = re.compile(r"\b((?:ftwbridge|process|python)_[a-z0-9_]+)\b")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_info")


def exprs() -> list[str]:
    """Every PromQL expression of the dashboard and the alert rules."""
    found = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        found += [rule["expr"] for rule in group["rules"]]
    return found


def families(text: str) -> dict[str, set[str] | None]:
    """Each metric family `# TYPE` declares, with the label names its samples carry (None
    for a family with no sample yet: a labelled counter nothing has counted)."""
    out: dict[str, set[str] | None] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            out.setdefault(line.split()[2], None)
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name, _, rest = line.partition("{")
        family = base(name.split()[0], out)
        if family is not None:
            labels = set(re.findall(r'(\w+)="', rest.partition("}")[0])) - {"le"}
            out[family] = (out[family] or set()) | labels
    return out


def base(name: str, have: dict[str, Any]) -> str | None:
    """The family of series `name` (`x_bucket`, `x_total` ... of `x`), or None."""
    return next(
        (name.removesuffix(s) for s in ("", *SUFFIXES) if name.removesuffix(s) in have), None
    )


def problems(expr: str, have: dict[str, set[str] | None]) -> list[str]:
    """What `expr` names that a live `/metrics` lacks: a series, or a label that none of the
    expression's series carries (checked where they have samples to tell)."""
    out = []
    named = SERIES.findall(expr)
    bases = [base(n, have) for n in named]
    out += [f"{n} (in {expr!r})" for n, b in zip(named, bases, strict=True) if b is None]
    used = {x.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for x in group.split(",")}
    for selector in re.findall(r"\{([^}]*)\}", expr):
        used |= set(re.findall(r"(\w+)\s*!?=~?", selector))
    sampled = [have[b] for b in bases if b is not None and have[b] is not None]
    for label in used - {"le", "instance", "job", ""}:
        if sampled and not any(label in labels for labels in sampled if labels is not None):
            out.append(f"label {label} (in {expr!r})")
    return out


async def scrape(env: Env) -> str:
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.get(f"{env.bridge.admin_url}/metrics")
    assert r.status_code == 200
    return r.text


async def busy(env: Env) -> None:
    """A home online, a session, an ok call and a refused one (a tool the scope lacks)."""
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            assert not (await client.call_tool("status", {})).is_error
            refused = await client.call_tool("history_query", {"series": ["nope"], "hours": 1})
            assert refused.is_error


async def test_process_platform_gc_and_build_series_and_no_created(env: Env) -> None:
    await busy(env)
    text = await scrape(env)
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "python_info",
        "python_gc_collections_total",
    ):
        assert re.search(rf"^{name}[ {{]", text, re.MULTILINE), name
    assert 'ftwbridge_build_info{python="' in text and f'version="{__version__}"' in text
    assert "_created" not in text


async def test_every_series_the_dashboard_and_alerts_name_exists(env: Env) -> None:
    await busy(env)
    have = families(await scrape(env))
    missing = [p for expr in exprs() for p in problems(expr, have)]
    unnamed = [
        e for e in exprs() if not SERIES.search(e) and not any(p in e for p in PROMETHEUS_OWN)
    ]
    assert not missing and not unnamed, (missing, unnamed)


def test_a_series_or_label_that_is_not_there_is_found() -> None:
    have: dict[str, set[str] | None] = {
        "ftwbridge_tool_calls": {"tool", "outcome"},
        "ftwbridge_x": None,
    }
    assert problems("rate(ftwbridge_tool_calls_total[5m])", have) == []
    assert problems("sum by (reason) (ftwbridge_x)", have) == []
    assert problems('rate(ftwbridge_tool_calls_total{code="x"}[5m])', have)
    assert problems("sum by (home) (ftwbridge_tool_calls_total)", have)
    assert problems("ftwbridge_nope", have)


def test_the_dashboard_is_grafana_json_with_a_datasource_to_pick() -> None:
    dash: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dash["templating"]["list"][0]["type"] == "datasource"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]


def test_every_alert_has_words_and_a_severity() -> None:
    for rule in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]:
        assert rule["alert"].startswith("Ftwbridge")
        assert rule["labels"]["severity"] in ("page", "ticket", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


async def test_the_status_page_shows_the_last_hour(env: Env) -> None:
    await busy(env)
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.get(f"{env.bridge.admin_url}/")
        post = await http.post(f"{env.bridge.admin_url}/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    page = r.text
    assert f"ftwbridge {__version__}" in page and '<p class="ok">ready</p>' in page
    assert "Homes online: <b>1</b>" in page and "Agent sessions: <b>1</b>" in page
    assert page.count("<svg") == 4 and "<script" not in page and "http://" not in page
    assert post.status_code == 405


async def test_points_a_minute_and_refusals_by_code(env: Env) -> None:
    """The sampler on the real registry with a fake wall clock: two points a minute apart."""
    clock = [1_000_000.0]
    status = Status(env.bridge.metrics.registry, wall_s=lambda: clock[0])
    status.take()
    await busy(env)
    clock[0] += SAMPLE_S
    status.take()
    page = status.page(None)
    assert "Tool calls a minute: <b>" in page
    assert "<td>E_" in page or "<td>" in page
    assert len(status.samples) == 2 and status.samples[-1].calls >= 2
    assert sum(status.samples[-1].refusals.values()) >= 1


def test_the_alert_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed here (Debian's prometheus package has it)")
    done = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


async def test_a_live_metrics_page_passes_promtools_lint(env: Env) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed here (Debian's prometheus package has it)")
    await busy(env)
    text = await scrape(env)
    done = await trio.run_process(
        [promtool, "check", "metrics"],
        stdin=text.encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
