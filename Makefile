PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run setup test soak lint bench check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m bot run

# connect to a real Slack workspace: create the app from manifest.yml, check its tokens, write .env
setup: $(STAMP)
	$(BIN)/python -m bot setup

# three workers (pytest-xdist), each file on one worker with its own embedded Valkey: the suite waits more
# than it computes (bots starting, leases lapsing, Slack's pacing; at two workers the CPU was idle ~60 % of the
# time), so on 2 cores a third worker takes ~25 % off (measured: 250-260 s against 310-360 s at two).
# The CI's external-Redis pass stays serial (one db).
# benchmarks/budgets: the pins of what a cycle costs in Redis (fast; they catch a cost creeping back)
# compileall first: the suite starts many processes of ours (bots, the CLI, bench contenders), and where
# PYTHONDONTWRITEBYTECODE is set nothing else writes our bytecode, so each compiled the same modules anew (0.5-1 s of
# CPU apiece; the compile takes ~1 s once, then skips what is unchanged)
# --no-loadscope-reorder: the files in the order tests/conftest.py gives them, the slowest first (xdist would
# otherwise hand out the files with the most tests first, and the long chaos files last)
# PYTESTCACHE: pytest keeps the test modules it rewrote (its assert messages) only where bytecode may be written;
# without that each worker rewrote all 180 of them anew before its first test (~4-7 s of CPU apiece)
PYTESTCACHE := PYTHONDONTWRITEBYTECODE=
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m compileall -q bot handlers store localslack blocks benchmarks tests
	$(PYTESTCACHE) $(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder tests benchmarks

# the chaos and fuzz proofs at full length (make test runs a bounded version of each)
soak: $(STAMP)
	$(BIN)/python -m compileall -q bot handlers store localslack blocks benchmarks tests
	SOAK=1 $(PYTESTCACHE) $(BIN)/python -m pytest -q -m soak

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# CLUSTER=1: the approve cycle on a real 3-master Valkey Cluster instead (latency, commands per master)
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'  # the LangGraph peer's extra: here only, not in make test
ifeq ($(CLUSTER),1)
	$(BIN)/python -m benchmarks.cluster_keys
else
	$(BIN)/python -m pytest -q benchmarks/budgets
	$(BIN)/python -m benchmarks
	$(BIN)/python -m benchmarks.cycle
	$(BIN)/python -m benchmarks.roundtrips
	$(BIN)/python -m benchmarks.http
	$(BIN)/python -m benchmarks.http.instructions  # counted under valgrind: repeats within ~0.3 %
	$(BIN)/python -m benchmarks.http.instructions --contenders agents  # each framework in the bot beside it alone
endif

check: $(STAMP)
	$(BIN)/python -m bot check

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
