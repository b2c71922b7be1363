# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: run test test-min lint fuzz venv bench soak proto clean install uninstall image

# The venv is done when its stamp exists, and the stamp is written last: a first run interrupted anywhere (Ctrl-C in
# ensurepip or in pip) leaves no stamp, so the next `make run` / `make test` installs again; a venv whose pip does not
# run (ensurepip or pip's self-upgrade cut short, its Python gone) is made again from scratch; a VENV that is not a
# venv is never removed. A venv completed before the stamp existed (its koordlet script newer than pyproject.toml)
# only gets the stamp. pip's own output is shown, step by step: a first install takes a minute or two, and silence
# that long reads as a hang.
STAMP := $(VENV)/.koordlet-installed

$(STAMP): pyproject.toml
	@set -e; \
	if "$(BIN)/python" -m pip --version >/dev/null 2>&1; then \
		if [ ! -e "$@" ] && [ "$(BIN)/koordlet" -nt pyproject.toml ]; then touch "$@"; exit 0; fi; \
	else \
		if [ -e "$(VENV)" ] && [ ! -f "$(VENV)/pyvenv.cfg" ]; then \
			echo "make: $(VENV) exists and is not a venv; move it away or pass VENV=..." >&2; exit 1; fi; \
		if [ -e "$(VENV)" ]; then echo "make: $(VENV) is half made (an interrupted first run?): making it again"; fi; \
		rm -rf "$(VENV)"; $(PYTHON) -m venv "$(VENV)"; \
	fi; \
	echo "make: installing koordlet-py and its test tools into $(VENV) (a minute or two; pip's steps follow)"; \
	echo "make: 1/2 upgrading pip"; \
	"$(BIN)/python" -m pip install --upgrade pip; \
	echo "make: 2/2 installing koordlet-py with its dependencies and test tools"; \
	"$(BIN)/python" -m pip install -e '.[test,lint]'; \
	echo "make: $(VENV) is ready"; \
	touch "$@"

venv: $(STAMP)

# The main job: the agent standalone on this host with embedded defaults
# (no cluster, metrics on http://127.0.0.1:9316/metrics, metric cache in ./var/: its state directory, which an
# installed agent keeps in /var/lib/koordlet).
run: venv
	STATE_DIRECTORY=$(CURDIR)/var $(BIN)/koordlet run --standalone $(ARGS)

# One pytest worker per CPU (pytest-xdist): most of the suite's time is real processes, sockets and kernels
# doing their part, not our CPU. The real-cgroup tests compare against the kernel's own accounting, so the
# neighbouring worker's load does not change their outcome. Nothing is written into the checkout.
# --dist loadgroup: tests marked xdist_group("name") share one worker (tests/realruntime: one containerd and one agent
# for the module); the rest are spread as usual.
test: venv
	$(BIN)/python -m pytest -q -n auto --dist loadgroup tests

# The dependency floors: the project installed with the oldest release of each runtime dependency that pyproject.toml
# allows (.ci/constraints-min.txt), in a venv of its own made once (again when either file changes), and the unit tests
# run on it, with the real-kernel tc test: the one test that drives pyroute2 against the kernel (root; skips
# otherwise). CI runs it after `make test`.
VENV_MIN  ?= .venv-min
STAMP_MIN := $(VENV_MIN)/.koordlet-installed

$(STAMP_MIN): pyproject.toml .ci/constraints-min.txt
	@set -e; \
	if ! "$(VENV_MIN)/bin/python" -m pip --version >/dev/null 2>&1; then \
		if [ -e "$(VENV_MIN)" ] && [ ! -f "$(VENV_MIN)/pyvenv.cfg" ]; then \
			echo "make: $(VENV_MIN) exists and is not a venv; move it away or pass VENV_MIN=..." >&2; exit 1; fi; \
		rm -rf "$(VENV_MIN)"; $(PYTHON) -m venv "$(VENV_MIN)"; \
	fi; \
	echo "make: installing koordlet-py at its dependency floors (.ci/constraints-min.txt) into $(VENV_MIN); pip's steps follow"; \
	"$(VENV_MIN)/bin/python" -m pip install -c .ci/constraints-min.txt -e '.[test]'; \
	touch "$@"

test-min: $(STAMP_MIN)
	$(VENV_MIN)/bin/python -m pytest -q -n auto tests/unit tests/integration/test_net_qos_real.py

# Static checks (README "Lint"): ruff's rule set, mypy over the packages, the import layers; settings in pyproject.toml.
# All three run; the target fails if any of them does.
lint: venv
	@rc=0; \
	echo '== ruff';         $(BIN)/ruff check || rc=1; \
	echo '== mypy';         $(BIN)/mypy || rc=1; \
	echo '== import-linter'; $(BIN)/lint-imports --no-logo || rc=1; \
	exit $$rc

# The benchmarks (root; bench/run.py lists them), each writing its section of bench/RESULTS.md from its own output with
# the date, commit, machine and load: BENCH="collect_cycle agent_soak" runs only those and keeps the other sections.
# The whole set takes about an hour and a half, most of it bench/agent_soak.py (10 minutes at each of 0, 100 and 250
# pods) and the 12 h metric cache simulation; BENCH=agent_soak_hour records the agent for an hour at 250 pods (only
# when named).
bench: venv
	$(BIN)/python bench/run.py $(BENCH)

# The tests marked slow: the property tests' long runs, 10,000 examples per parser (annotations, NodeSLO, pods file,
# ttRPC/mux framing), and the soak-scale unit tests (the metric cache under 12 h of load and 15 minutes of pod churn,
# the executor's cache through 2,000 pods). CI runs it after `make test`; `make test` runs the same properties with a
# few dozen examples each.
fuzz: venv
	$(BIN)/python -m pytest -q -n auto -m slow tests

# The soak: the agent daemon under 200-pod churn on real cgroups, with NRI traffic and hostile pods, for
# KOORDLET_SOAK_SECONDS (default 1800); RSS, fds, threads, enforcement and /healthz checked throughout. Root and
# cgroup v1 (skips otherwise). KOORDLET_SOAK_OUT=file.json keeps the time series; tests/soak/test_soak.py has the rest.
soak: venv
	$(BIN)/python -m pytest -q -s -p no:xdist -m soak tests/soak

# Regenerate koordlet/_proto/*/*_pb2*.py and their .pyi stubs from the .proto sources in proto/ (grpcio-tools and
# mypy-protobuf from the test extra).
proto: venv
	$(BIN)/python proto/generate.py

# The container image without a registry (README "Image"; root): an OCI archive at IMAGE_OUT whose root filesystem
# is Debian 12 from its packages (debootstrap minbase + python3 from the mirror this machine's apt uses, kept in
# IMAGE_CACHE for a week) with the agent in a venv at /opt/koordlet; image/build.py says how. `ctr -n k8s.io images import $(IMAGE_OUT)` loads it on a node;
# IMAGE_REF is the name it gets there (the manifests' image by default). The Containerfile builds the same image
# where a registry serves debian:12-slim.
IMAGE_OUT   ?= build/image/koordlet-image.tar
IMAGE_REF   ?= ghcr.io/koordlet-py/koordlet:latest
IMAGE_CACHE ?= build/image/cache

image: venv
	$(BIN)/python -m image.build --out $(IMAGE_OUT) --ref $(IMAGE_REF) --cache $(IMAGE_CACHE)

clean:
	rm -rf $(VENV) $(VENV_MIN) var build *.egg-info .mypy_cache .ruff_cache .import_linter_cache

# --- bare host (README "Bare host under systemd") -----------------------------------------------------------------
# `make install` (root): the agent in a venv of its own under PREFIX (never pip into the system's Python: PEP 668),
# the command linked into BINDIR, the unit into UNITDIR (its /opt/koordlet and /etc/koordlet rewritten to PREFIX and
# CONFDIR) and the example config at CONFDIR/config.yaml unless one is there. Run again to upgrade. `make uninstall`
# removes what install added and keeps the config and the state (STATEDIR, LOGDIR) unless PURGE=1.
PREFIX    ?= /opt/koordlet
BINDIR    ?= /usr/local/bin
CONFDIR   ?= /etc/koordlet
UNITDIR   ?= /etc/systemd/system
STATEDIR  ?= /var/lib/koordlet
LOGDIR    ?= /var/log/koordlet
SYSTEMCTL ?= systemctl
PURGE     ?=
# systemctl only for the real unit directory on a host booted with systemd (not for a staged or test install)
LIVE_UNIT  = [ "$(UNITDIR)" = /etc/systemd/system ] && [ -d /run/systemd/system ]

install:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "make install: koordlet needs Python >= 3.11 ($(PYTHON) is older)" >&2; exit 1; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || \
		{ echo "make install: $(PYTHON) cannot make a venv: apt-get install python3-venv" >&2; exit 1; }
	@# a venv whose interpreter went away (a distribution upgrade) is made again
	"$(PREFIX)/bin/python" -c '' 2>/dev/null || $(PYTHON) -m venv --clear "$(PREFIX)"
	"$(PREFIX)/bin/pip" install --quiet --disable-pip-version-check .
	install -d "$(BINDIR)" "$(UNITDIR)" "$(CONFDIR)"
	ln -sfn "$(PREFIX)/bin/koordlet" "$(BINDIR)/koordlet"
	sed -e 's|/opt/koordlet|$(PREFIX)|g' -e 's|/etc/koordlet|$(CONFDIR)|g' systemd/koordlet.service \
		> "$(UNITDIR)/.koordlet.service.new"
	chmod 0644 "$(UNITDIR)/.koordlet.service.new"
	mv -f "$(UNITDIR)/.koordlet.service.new" "$(UNITDIR)/koordlet.service"
	@if [ -e "$(CONFDIR)/config.yaml" ]; then echo "kept $(CONFDIR)/config.yaml (systemd/config.yaml is the example)"; \
		else install -m 0644 systemd/config.yaml "$(CONFDIR)/config.yaml"; echo "installed $(CONFDIR)/config.yaml"; fi
	@if $(LIVE_UNIT); then $(SYSTEMCTL) daemon-reload; fi
	@echo "installed: $(BINDIR)/koordlet -> $(PREFIX)/bin/koordlet, $(UNITDIR)/koordlet.service"
	@echo "start it:  systemctl enable --now koordlet   (upgrade: systemctl restart koordlet)"

uninstall:
	@if $(LIVE_UNIT); then $(SYSTEMCTL) disable --now koordlet.service || true; fi
	rm -f "$(UNITDIR)/koordlet.service"
	@if $(LIVE_UNIT); then $(SYSTEMCTL) daemon-reload; fi
	@# only our link, only our venv (a PREFIX that is not a venv is never removed)
	@if [ "$$(readlink "$(BINDIR)/koordlet")" = "$(PREFIX)/bin/koordlet" ]; then rm -f "$(BINDIR)/koordlet"; fi
	@if [ -f "$(PREFIX)/pyvenv.cfg" ]; then rm -rf "$(PREFIX)"; echo "removed $(PREFIX)"; \
		elif [ -e "$(PREFIX)" ]; then echo "make uninstall: $(PREFIX) is not a venv; left alone" >&2; fi
	@if [ -n "$(PURGE)" ]; then \
		rm -f "$(CONFDIR)/config.yaml"; rmdir "$(CONFDIR)" 2>/dev/null || true; \
		for d in "$(STATEDIR)" "$(LOGDIR)"; do case "$$d" in */koordlet) rm -rf "$$d";; \
			*) echo "make uninstall: $$d does not end in /koordlet; left alone" >&2;; esac; done; \
		echo "purged $(CONFDIR)/config.yaml, $(STATEDIR), $(LOGDIR)"; \
	else echo "kept $(CONFDIR) and $(STATEDIR) (PURGE=1 removes them)"; fi
