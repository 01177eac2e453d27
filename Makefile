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

# two workers (pytest-xdist), each file on one worker with its own embedded Valkey: the suite waits more
# than it computes, so this halves its time on 2 cores. The CI's external-Redis pass stays serial (one db).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the chaos and fuzz proofs at full length (make test runs a bounded version of each)
soak: $(STAMP)
	SOAK=1 $(BIN)/python -m pytest -q -m soak

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# CLUSTER=1: the approve cycle on a real 3-master Valkey Cluster instead (latency, commands per master)
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'  # the LangGraph peer's extra: here only, not in make test
ifeq ($(CLUSTER),1)
	$(BIN)/python -m tests.bench.cluster_keys
else
	$(BIN)/python -m tests.bench
	$(BIN)/python -m tests.bench.cycle
	$(BIN)/python -m tests.bench.roundtrips
	$(BIN)/python -m tests.bench.http
	$(BIN)/python -m tests.bench.http.instructions  # counted under valgrind: repeats within ~0.3 %
endif

check: $(STAMP)
	$(BIN)/python -m bot check

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
