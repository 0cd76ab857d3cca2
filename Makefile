# The two set-up commands: `make demo` (the main job) and `make test` (every quality gate).
# Each creates .venv on a fresh machine and installs the project with what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

PEERS := peers/node_modules/.installed

.PHONY: demo cluster test lint typecheck unit peers browser postgres haproxy caddy promtool bench bench-profile bench-instructions bench-opens bench-turns bench-batches bench-listen soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ftwbridge demo $(DEMO_ARGS)

# Many instances on one machine (docs/operations.md, "Many instances"): a throwaway PostgreSQL,
# three bridge instances, the keys service, HAProxy in front and stub homes spread across them.
cluster: $(STAMP) postgres haproxy
	$(BIN)/python -m cluster $(CLUSTER_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict ftwbridge stubbox devtools cluster

# Real MCP peers for the tests (TypeScript SDKs, MCP Inspector, the conformance suite, Node 22),
# pinned in peers/package-lock.json and installed from the npm registry. `npm ci` installs
# exactly the lock and never writes it, so the test command leaves the clone as it found it;
# it refuses a lock that lacks a package (tests/test_peers_lock.py keeps the lock whole).
$(PEERS): peers/package.json peers/package-lock.json
	cd peers && npm ci --no-audit --no-fund --loglevel=error
	touch $(PEERS)

peers: $(PEERS)

# Debian's Chromium for the consent-page tests (Playwright drives it; it downloads no browser).
browser:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# Debian's PostgreSQL server programs for the store tests (tests/store/pgserver.py starts a
# throwaway server from them; the package's own cluster service is not used).
postgres:
	command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq postgresql)

# Debian's HAProxy, the load balancer in front of the instances of `make cluster` and its tests.
haproxy:
	command -v haproxy >/dev/null || (apt-get update -qq && apt-get install -y -qq haproxy)

# Debian's Caddy, for `caddy validate` of the TLS proxy example deploy/Caddyfile
# (tests/ops/test_deploy.py, skipped without it). Not a prerequisite of `make test`: on a
# machine run by systemd the package starts a Caddy server on port 80 as it installs.
caddy:
	command -v caddy >/dev/null || (apt-get update -qq && apt-get install -y -qq caddy)

# Debian's prometheus package, for its promtool: `promtool check rules` of the shipped alert
# rules and `promtool check metrics` of a live /metrics (tests/ops/test_watching.py, skipped
# without it). Not a step of `make test`, for the reason Caddy is not.
promtool:
	command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus)

# The tests run on pytest-xdist workers: much of their time is spent waiting on processes
# they start and on real sockets, so more workers than this machine's 2 cores pay; 3 rather
# than 4, as each worker costs its own imports, collection and PostgreSQL, and 3 already keep
# both cores busy. Tests that share one server stay on one worker, and the longest go first
# (tests/conftest.py).
# Bytecode is written (PYTHONDONTWRITEBYTECODE cleared; __pycache__ is ignored by git), so
# the workers and the hundreds of bridge and stub processes the tests start do not each
# compile the same sources again.
UNIT_WORKERS ?= 3
UNIT_ARGS ?= -n $(UNIT_WORKERS) --dist loadgroup --no-loadscope-reorder

unit: $(STAMP) $(PEERS) browser postgres haproxy
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -W error $(UNIT_ARGS)

# lint, typecheck and unit side by side; each one's output is printed whole when it ends
# (--output-sync), and any one failing fails the target.
test: $(STAMP) $(PEERS) browser postgres haproxy
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck unit

# Speed and memory figures and the goals they judge (docs/performance.md); needs wrk and
# valgrind (callgrind's instruction counts), which this installs from Debian, the peers for
# the TypeScript SDK's server (Node from the npm registry), and PostgreSQL and HAProxy for the
# cluster case (bench/cluster_hop.py).
bench: $(STAMP) $(PEERS) postgres haproxy
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	command -v valgrind >/dev/null || (apt-get update -qq && apt-get install -y -qq valgrind)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python bench/run.py $(BENCH_ARGS)

# The standing soak (docs/operations.md, "Faults"): the bridge under load and injected faults on
# loopback, then its invariants; about three minutes. SOAK_SCALE=3 (or SOAK_ARGS=--scale 3) runs
# longer; SOAK_ARGS=--verbose adds what the assistant heard and the operator saw.
soak: $(STAMP)
	$(BIN)/python -m soak.run $(SOAK_ARGS)

# Where a bridged call's time goes: pyinstrument's profile of the bridge under wrk (bench/results/).
bench-profile: $(STAMP)
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python bench/profile.py

# What a session open costs the bridge (bench/opens.py): CPU ms per open and opens per second,
# medians of 5 rounds (about 15 s), then instructions per open under callgrind (about 40 s).
bench-opens: $(STAMP)
	command -v valgrind >/dev/null || (apt-get update -qq && apt-get install -y -qq valgrind)
	$(BIN)/python bench/opens.py
	$(BIN)/python bench/opens.py --instructions

# Instructions per call of the bridge and each peer (sdk-trio, sdk-uvicorn, the TypeScript SDK's
# server on Node) under valgrind's callgrind: a figure a busy machine cannot move; then what the
# cluster hop adds to a call (bench/hop_instructions.py: two instances, PostgreSQL).
# BENCH_BASE=REV also measures the bridge at that git revision (docs/performance.md).
bench-instructions: $(STAMP) $(PEERS) postgres haproxy
	command -v valgrind >/dev/null || (apt-get update -qq && apt-get install -y -qq valgrind)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	cd bench && ../$(BIN)/python instructions.py $(if $(BENCH_BASE),--base $(BENCH_BASE))
	$(BIN)/python bench/hop_instructions.py $(if $(BENCH_BASE),--base $(BENCH_BASE))

# Scheduler turns per warm bridged call (bench/turns.py): trio's run loop counted by an
# instrument, with where the bridge's tasks gave up the CPU; about 15 s, no load can move it.
bench-turns: $(STAMP)
	$(BIN)/python bench/turns.py

# Each run-loop batch's length at 64 connections (bench/batches.py, docs/performance.md
# "Scheduler turns per call", "The collector"): this tree against BENCH_BASE (default main's
# parent commit HEAD~1) in interleaved rounds; about two minutes.
bench-batches: $(STAMP)
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python bench/batches.py --tree base=$(or $(BENCH_BASE),HEAD~1) --tree this=.

# Live streams alone (bench/listen.py, docs/performance.md "Live streams"): 1,000
# subscriptions/listen streams over 250 stub homes at 0.2 Hz against one bridge process;
# about three minutes. BENCH_LISTEN_STREAMS=N runs another size (4 streams per home).
bench-listen: $(STAMP)
	$(BIN)/python bench/run.py --only listen

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
