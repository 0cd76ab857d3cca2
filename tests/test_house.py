"""Rooms a newcomer can hold: every module of `ftwbridge/` and `stubbox/` within 400 lines and
every function within 60, no import arrow running up the layers, and no import cycle beyond the
type-only back references listed here (docs/architecture.md, "Layers"; `devtools/house.py`
counts, `python -m devtools.house` prints the figures)."""

from __future__ import annotations

from devtools import house

LONG_ON_PURPOSE = {
    # The strict CBOR check runs on every frame a box sends: one loop over the head bytes, with
    # the tables bound to locals; a helper per item would cost a Python call per CBOR item
    # (docs/performance.md, "Instructions per call"). Its docstring is a third of it.
    "ftwbridge/proto/envelope.py:scan",
}


TYPE_ONLY_CYCLES = [
    # A helper typed with the owner that binds it, imported under TYPE_CHECKING only: the
    # settings' rules across fields take the `Config` they check.
    ["ftwbridge.config", "ftwbridge.config_rules"],
    # what a box sends once authenticated, handled for the `Door` that calls it
    ["ftwbridge.door.dispatch", "ftwbridge.door.door"],
]


def test_modules_stay_within_400_lines() -> None:
    big = house.figures().big_modules
    assert big == []


def test_functions_stay_within_60_lines() -> None:
    long = [(w, n) for w, n in house.figures().long_functions if w not in LONG_ON_PURPOSE]
    assert long == []


def test_no_import_arrow_runs_up() -> None:
    assert house.figures().arrows_up == []


def test_no_import_cycle_but_the_type_only_ones() -> None:
    figures = house.figures()
    assert figures.module_cycles == TYPE_ONLY_CYCLES
    assert figures.room_cycles == [["ftwbridge.config", "ftwbridge.config_rules"]]


def test_every_module_has_a_layer() -> None:
    for name in house.modules():
        house.layer_of(name)  # raises KeyError for a module no layer holds


def test_the_counts_see_an_arrow_up_and_a_ring() -> None:
    # The counter itself: a lower layer importing a higher one, and a ring of three.
    assert house.layer_of("ftwbridge.proto.frame") < house.layer_of("ftwbridge.run")
    assert house.cycles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]) == [["a", "b", "c"]]
    assert house.cycles([("a", "b"), ("b", "c")]) == []


CALLED_FROM_OUTSIDE = [
    # Called by a framework or a protocol, which vulture cannot see.
    "before_io_wait",  # bench/turns.py, bench/batches.py: trio.abc.Instrument hooks
    "after_io_wait",
    "task_scheduled",
    "before_task_step",
    "after_task_step",
    "get_tokens",  # devtools/signin.py: the mcp client's TokenStorage protocol
    "set_tokens",
    "get_client_info",
    "set_client_info",
    "_read_data",  # ftwbridge/edge.py: overrides hypercorn's TCPServer method
    "connect_unix_socket",  # ftwbridge/oauth/pinned.py: httpcore's network backend
    "wait_send_all_might_not_block",  # ftwbridge/mesh/lean.py: trio.abc.Stream's abstract method
    # The test rig's own verbs: tests are their callers by design.
    "restart_instance",  # cluster/rig.py
    "set_instance_state",
    "restart_postgres",
    "reload_haproxy",  # cluster/services.py
    "grant_agent",  # devtools/rig.py
    # The one-process cluster directory, which the directory's tests run and which the
    # bridge's composition takes up as the cluster directory lands.
    "LocalDirectory",
]


def test_nothing_only_tests_call() -> None:
    """Every function, method and class of the product and its tools has a caller outside
    `tests/` (vulture over everything but the tests, routes and validators excepted)."""
    import vulture

    scan = vulture.Vulture(
        ignore_names=CALLED_FROM_OUTSIDE,
        ignore_decorators=["@*.route", "@*.before_request", "@field_validator"],
    )
    scan.scavenge(
        [
            str(house.ROOT / d)
            for d in ("ftwbridge", "stubbox", "devtools", "cluster", "soak", "bench")
        ]
    )
    dead = [
        f"{u.filename}:{u.first_lineno} {u.name}"
        for u in scan.get_unused_code(min_confidence=60)
        if u.typ in ("function", "method", "class", "property")
    ]
    assert dead == []
