# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: run test lint fuzz venv bench soak proto clean

$(BIN)/koordlet: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]'
	@touch $@

venv: $(BIN)/koordlet

# The main job: the agent standalone on this host with embedded defaults
# (no cluster, metrics on http://127.0.0.1:9316/metrics, metric cache in ./var/).
run: venv
	$(BIN)/koordlet run --standalone $(ARGS)

# One pytest worker per CPU (pytest-xdist): most of the suite's time is real processes, sockets and kernels
# doing their part, not our CPU. The real-cgroup tests compare against the kernel's own accounting, so the
# neighbouring worker's load does not change their outcome. Nothing is written into the checkout.
test: venv
	$(BIN)/python -m pytest -q -n auto tests

# Static checks (README "Lint"): ruff's rule set, mypy over the packages, the import layers; settings in pyproject.toml.
# All three run; the target fails if any of them does.
lint: venv
	@rc=0; \
	echo '== ruff';         $(BIN)/ruff check || rc=1; \
	echo '== mypy';         $(BIN)/mypy || rc=1; \
	echo '== import-linter'; $(BIN)/lint-imports --no-logo || rc=1; \
	exit $$rc

bench: venv
	$(BIN)/python bench/collect_cycle.py
	$(BIN)/python bench/topology_scan.py
	$(BIN)/python bench/nodemetric_build.py
	$(BIN)/python bench/gpu_collect.py
	$(BIN)/python bench/qos_reconcile.py
	$(BIN)/python bench/resctrl_cycle.py
	$(BIN)/python bench/tc_reconcile.py
	$(BIN)/python bench/nri_roundtrip.py
	$(BIN)/python bench/podresources_list.py
	$(BIN)/python bench/cpi_window.py
	$(BIN)/python bench/http_scrapes.py
	$(BIN)/python bench/churn_state.py

# The property tests' long runs: 10,000 examples per parser (annotations, NodeSLO, pods file, ttRPC/mux framing).
# CI runs it after `make test`; `make test` runs the same properties with a few dozen examples each.
fuzz: venv
	$(BIN)/python -m pytest -q -n auto -m slow tests

# The soak (issue 18): the agent daemon under 200-pod churn on real cgroups, with NRI traffic and hostile pods, for
# KOORDLET_SOAK_SECONDS (default 1800); RSS, fds, threads, enforcement and /healthz checked throughout. Root and
# cgroup v1 (skips otherwise). KOORDLET_SOAK_OUT=file.json keeps the time series; tests/soak/test_soak.py has the rest.
soak: venv
	$(BIN)/python -m pytest -q -s -p no:xdist -m soak tests/soak

# Regenerate proto/*_pb2*.py and their .pyi stubs from the .proto sources (grpcio-tools and mypy-protobuf from the
# test extra).
proto: venv
	$(BIN)/python proto/generate.py

clean:
	rm -rf $(VENV) var build *.egg-info .mypy_cache .ruff_cache .import_linter_cache
