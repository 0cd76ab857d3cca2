"""The listen stream's rules without I/O: the honoured filter, the pacing of updates, and the
bytes of its events as the official SDK reads them."""

from __future__ import annotations

import json

import mcp_types as types
import pytest

from ftwbridge.mcp.inbound import Rejection
from ftwbridge.mcp.listen_rules import (
    MAX_URIS,
    SUBSCRIPTION_ID,
    UpdatePacer,
    ack,
    graceful_end,
    honored,
    live_uri,
    updated,
)
from ftwbridge.proto.names import Scope

LIVE = (Scope.FTW_LIVE_READ.value,)


def test_only_the_tokens_own_live_uri_is_honoured() -> None:
    mine = live_uri("h/1")
    assert mine == "ftw://home/h%2F1/live"
    asked = {"resourceSubscriptions": [mine, live_uri("h2")], "toolsListChanged": True}
    assert honored({"notifications": asked}, 1, home="h/1", scopes=LIVE) == {
        "resourceSubscriptions": [mine]
    }
    assert honored({"notifications": asked}, 1, home="h/1", scopes=()) == {}  # no live scope
    assert honored({"notifications": {}}, 1, home="h/1", scopes=LIVE) == {}


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"notifications": []},
        {"notifications": {"resourceSubscriptions": "ftw://x"}},
        {"notifications": {"resourceSubscriptions": [1]}},
        {"notifications": {"resourceSubscriptions": ["u"] * (MAX_URIS + 1)}},
        {"notifications": {"toolsListChanged": "yes"}},
    ],
)
def test_bad_filters_are_invalid_params(params: dict[str, object]) -> None:
    out = honored(params, "r", home="h", scopes=LIVE)
    assert isinstance(out, Rejection) and out.code == -32602 and out.id == "r"


def test_readings_wait_for_the_interval_and_notable_changes_do_not() -> None:
    p = UpdatePacer(5.0)
    assert p.due_at() is None
    p.changed(0.0, notable=False)
    assert p.due_at() is not None and p.due_at() <= 0.0  # the first goes at once
    p.sent(0.0)
    p.changed(1.0, notable=False)
    assert p.due_at() == 5.0
    p.changed(2.0, notable=True)  # a source's state, the mode, a dispatch block: now
    due = p.due_at()
    assert due is not None and due <= 2.0
    p.sent(2.0)
    assert p.due_at() is None


def _data(event: bytes) -> dict[str, object]:
    lines = event.decode().split("\n")
    assert lines[0] == "event: message" and event.endswith(b"\n\n")
    parsed: dict[str, object] = json.loads(lines[1].removeprefix("data: "))
    return parsed


@pytest.mark.parametrize("rid", ["listen-1", 7])
def test_events_parse_as_the_sdk_types_and_keep_the_ids_json_type(rid: str | int) -> None:
    a = types.SubscriptionsAcknowledgedNotification.model_validate(
        _data(ack(rid, {"resourceSubscriptions": ["u"]}))
    )
    assert a.params.notifications.resource_subscriptions == ["u"]
    meta = a.params.meta
    assert meta is not None and meta[SUBSCRIPTION_ID] == rid
    u = types.ResourceUpdatedNotification.model_validate(_data(updated(rid, "u")))
    assert u.params.uri == "u" and u.params.meta is not None
    assert u.params.meta[SUBSCRIPTION_ID] == rid
    end = _data(graceful_end(rid))
    assert end["id"] == rid
    r = types.SubscriptionsListenResult.model_validate(end["result"])
    assert r.meta is not None and r.meta[SUBSCRIPTION_ID] == rid
