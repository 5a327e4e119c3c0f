# ego_assets: `make demo` runs the whole platform on local files; `make test` checks it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The local instance that `make demo` writes and `make dev` shows (tests use their own).
LOCAL_DAGSTER_HOME ?= $(CURDIR)/.dagster_home

.PHONY: install preflight system-deps lerobot-env robomimic-venv test test-under-load lint demo dev bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,prod,readers]'
	touch $(STAMP)

install: $(STAMP)

# robomimic 0.3.0 (PyPI) in its own virtualenv (its torch pins fight the platform's), for
# the Holos HDF5 reader test and its own train.py on a release (docs/releases.md). It is
# installed with --no-deps beside what those import (pins in constraints.txt): train.py
# needs torchvision (robomimic's models), imageio and matplotlib. No torchvision on the
# registries loads beside the CPU-only torch 2.13 wheel, so torch 2.14.1 + torchvision
# 0.29.1 (with their CUDA libraries: ~5.6 GB). Not needed for low-dim BC with rollouts and
# TensorBoard off: robosuite, egl_probe, tensorboardX. Re-run when the pins change.
ROBOMIMIC_VENV := .venv-robomimic
ROBOMIMIC_STAMP := $(ROBOMIMIC_VENV)/.installed-stamp
$(ROBOMIMIC_STAMP): constraints.txt
	test -x $(ROBOMIMIC_VENV)/bin/python || $(PYTHON) -m venv $(ROBOMIMIC_VENV)
	$(ROBOMIMIC_VENV)/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt \
		torch torchvision numpy h5py six tqdm termcolor psutil imageio matplotlib
	$(ROBOMIMIC_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps robomimic==0.3.0
	touch $(ROBOMIMIC_STAMP)

robomimic-venv: $(ROBOMIMIC_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy ego_assets

# Debian packages the tests need (headless Chromium + its WebDriver for the browser UI
# test, FFmpeg's libraries for lerobot's torchcodec decoder, h5dump for the HDF5 reader
# test); a no-op
# when already installed, apt-get only when one is missing (CI runs as root).
SYSTEM_PACKAGES := chromium chromium-driver ffmpeg hdf5-tools
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The real lerobot in its own venv for the CERES export conformance test (pins and
# reasons in the requirements file); rebuilt from scratch only when that file changes.
# lerobot 0.6.x, the release its users run, needs Python 3.12: take `python3.12` if it
# runs, else pyenv's 3.12 (its shim fails while another version is selected).
LEROBOT_PY312 := $(shell for p in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12; do \
	"$$p" -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)
ifneq ($(LEROBOT_PY312),)
LEROBOT_PYTHON := $(LEROBOT_PY312)
LEROBOT_REQUIREMENTS := ego_assets_tests/lerobot/requirements.txt
LEROBOT_VERSION := 0.6.1
else
# FALLBACK without Python 3.12: lerobot 0.4.4, the newest release for Python 3.11 (same
# LeRobotDataset v3.0 layout), on our $(PYTHON).
LEROBOT_PYTHON := $(PYTHON)
LEROBOT_REQUIREMENTS := ego_assets_tests/lerobot/requirements-py311.txt
LEROBOT_VERSION := 0.4.4
endif
LEROBOT_VENV := .venv-lerobot
LEROBOT_STAMP := $(LEROBOT_VENV)/.installed-stamp
$(LEROBOT_STAMP): $(LEROBOT_REQUIREMENTS)
	rm -rf $(LEROBOT_VENV)
	$(LEROBOT_PYTHON) -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(LEROBOT_REQUIREMENTS)
	$(LEROBOT_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps lerobot==$(LEROBOT_VERSION)
	touch $@

lerobot-env: $(LEROBOT_STAMP)

# First, in seconds: what `make test` installs and why, what it expects running
# (PostgreSQL), and one line and exit 1 when something it needs is missing and it cannot
# install it (.ci/preflight.py).
preflight:
	@$(PYTHON) .ci/preflight.py --lerobot-python "$(LEROBOT_PYTHON)" \
		--lerobot-version $(LEROBOT_VERSION) $(SYSTEM_PACKAGES)

test: preflight lint system-deps lerobot-env robomimic-venv
	env -u DAGSTER_HOME $(BIN)/dagster definitions validate -w workspace.yaml
	EGO_LEROBOT_PYTHON=$(CURDIR)/$(LEROBOT_VENV)/bin/python HF_HUB_OFFLINE=1 $(BIN)/pytest -n 2 -q

# The suite on a busy laptop: `make test` beside one busy-looping process per core (what
# `stress --cpu $(nproc)` does), stopped when the suite ends; prints the wall time.
test-under-load:
	@hogs=; for i in $$(seq $$(nproc)); do $(PYTHON) -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	trap "kill $$hogs" EXIT; start=$$(date +%s); \
	$(MAKE) test; rc=$$?; \
	echo "make test beside $$(nproc) CPU hogs: rc $$rc, $$(( $$(date +%s) - start )) s wall, load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	exit $$rc

demo: $(STAMP)
	mkdir -p $(LOCAL_DAGSTER_HOME)
	DAGSTER_HOME=$(LOCAL_DAGSTER_HOME) $(BIN)/ego-assets demo --data ./data

dev: $(STAMP)
	$(BIN)/python -m ego_assets.defs.runs $(LOCAL_DAGSTER_HOME)  # its dagster.yaml, if none
	DAGSTER_HOME=$(LOCAL_DAGSTER_HOME) EGO_DATA_DIR=$(CURDIR)/data $(BIN)/dagster dev -w workspace.yaml

bench: $(STAMP)
	$(BIN)/python -m bench normalize --json bench/results/normalize.json
	$(BIN)/python -m bench quality --json bench/results/quality.json
	$(BIN)/python -m bench orchestration --json bench/results/orchestration.json
	$(BIN)/python -m bench holos --json bench/results/holos.json
	$(BIN)/python -m bench egosmith --json bench/results/egosmith.json
	$(BIN)/python -m bench api --json bench/results/api.json
	$(BIN)/python -m bench catalog --json bench/results/catalog.json

clean:
	rm -rf data .dagster_home
