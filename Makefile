# Two commands for a fresh machine (see README):
#   make run    set up .venv from requirements.txt and serve the app on http://localhost:8501 (CPU)
#   make test   set up .venv, Debian's Chromium for the browser tests, and run every test
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

.PHONY: run test browser lint gpucheck load
run: $(VENV)/.installed
	JAX_PLATFORMS=$${JAX_PLATFORMS:-cpu} $(PY) serve.py --server.port $(PORT)

browser:
	@command -v chromium >/dev/null 2>&1 || bash scripts/install_chromium.sh

test: $(VENV)/.installed browser
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check attnlab pages app.py tests

gpucheck:
	bash scripts/gpu_check.sh

load: $(VENV)/.installed browser
	$(PY) -m pytest -q -m load -s
