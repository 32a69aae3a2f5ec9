# Two commands for a fresh machine (see README):
#   make run    set up .venv from requirements.lock and serve the app on http://localhost:8501 (CPU)
#   make test   set up .venv, Debian's Chromium and HAProxy for the tests, and run every test
#   make rehearse  the hosted class (deploy/k8s) rehearsed on this machine (scripts/rehearse.py; also in make test)
# requirements.txt says what we need (lower bounds); requirements.lock pins every package for
# Python 3.11 on Linux x86_64 and is what gets installed. After editing requirements.txt:
#   make lock   re-resolve the lock with uv (keeps existing pins where they still fit;
#               UPGRADE=1 moves everything to the newest allowed versions)
#   make lock-image   the GPU image's own lock, requirements-image.lock (CPython 3.12, JAX's CUDA 13 wheels and
#               TransformerEngine included, with hashes; deploy/Dockerfile installs exactly it; UPGRADE=1 as above)
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501

UV_VERSION := 0.13.9
LOCK_FLAGS := --python-version 3.11 --python-platform x86_64-unknown-linux-gnu
# deploy/uv-image.toml: the static metadata of TransformerEngine's JAX sdist, so uv resolves it without building it
IMAGE_LOCK_FLAGS := --python-version 3.12 --python-platform x86_64-unknown-linux-gnu --generate-hashes \
  --config-file deploy/uv-image.toml

# uv installs the lock in 30 s where pip takes 76 s; pip is the fallback where uv cannot reach an index. With its
# bytecode compiled: uv skips it by default, and where PYTHONDONTWRITEBYTECODE is set (CI) every process would
# compile JAX, Streamlit and Ray again on import (6.6 s an import against 2.3 s: the suite took 41 min, not 27)
$(VENV)/.installed: requirements.lock
	python3 -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -r requirements.lock || $(PY) -m pip install -q -r requirements.lock
	touch $@

.PHONY: run test browser lint gpucheck load lock lock-image rehearse
lock:
	python3 -m venv $(VENV)/uv
	$(VENV)/uv/bin/python -m pip install -q uv==$(UV_VERSION)
	$(VENV)/uv/bin/uv pip compile requirements.txt $(LOCK_FLAGS) $(if $(UPGRADE),--upgrade) -o requirements.lock

lock-image:
	python3 -m venv $(VENV)/uv
	$(VENV)/uv/bin/python -m pip install -q uv==$(UV_VERSION)
	$(VENV)/uv/bin/uv pip compile requirements-image.txt $(IMAGE_LOCK_FLAGS) $(if $(UPGRADE),--upgrade) \
	  -o requirements-image.lock

run: $(VENV)/.installed
	JAX_PLATFORMS=$${JAX_PLATFORMS:-cpu} $(PY) serve.py --server.port $(PORT)

browser:
	@bash scripts/install_debian_tools.sh

# three processes, a file each at a time, on CI's two cores: many tests wait on a server, a child or a Ray cluster
# they started, so a third keeps both cores busy (the main set: 662 s with three, 797 s with two, this 2-core machine
# on 2026-12-06); then the tests whose limits are in seconds, alone
test: $(VENV)/.installed browser
	$(PY) -m pytest -q -n 3 --dist loadfile -m "not load and not alone"
	$(PY) -m pytest -q -m "alone and not load"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check attnlab pages app.py serve.py scripts tests
	$(VENV)/bin/mypy

gpucheck:
	bash scripts/gpu_check.sh

# the hosted class rehearsed here: the manifests' pods as processes behind HAProxy, a class, a cluster's faults
rehearse: $(VENV)/.installed browser
	PATH=$(abspath $(VENV))/bin:$$PATH $(PY) scripts/rehearse.py --check $(ARGS)

load: $(VENV)/.installed browser
	$(PY) -m pytest -q -m load -s
