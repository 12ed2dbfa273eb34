# Two entry points for a new user: `make demo` and `make test`. Each sets up its own
# virtual environment (.venv) and installs what it needs, so a clean clone with only
# Python on the machine is enough.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch is pinned here (not in pyproject, which accepts any torch >= 2.4) so that a fresh
# machine installs the release it already has on disk instead of downloading another.
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: demo test test-fast install install-dev bench corpus clean

# tools/install_env.py prints each step, about how long it takes and a line at least every 10 s while it
# runs; it installs with uv where uv can be had (torch in seconds instead of minutes), with pip otherwise
# (INSTALLER=pip forces pip). The demo needs the CLI's extras only ([all]); the tests need [dev].
$(VENV)/.installed-all: pyproject.toml Makefile tools/install_env.py
	$(PYTHON) tools/install_env.py --venv $(VENV) --torch "$(TORCH_PINS)" --extras all
	touch $@

$(VENV)/.installed-dev: pyproject.toml Makefile tools/install_env.py
	$(PYTHON) tools/install_env.py --venv $(VENV) --torch "$(TORCH_PINS)" --extras dev
	touch $@ $(VENV)/.installed-all

install: $(VENV)/.installed-all

install-dev: $(VENV)/.installed-dev

# writes torchwise-demo/ in the current directory: the data, the run, its export (the README tour goes on from it)
demo: install
	$(VENV)/bin/torchwise demo

# Both tiers: tests/unit (in-process) and tests/integration (the CLI end to end, torchrun, README, examples).
# Two pytest workers: most integration tests wait on a subprocess that starts torch, so two at a time fill
# two cores (13 min instead of 20 on a 2-core machine). TEST_WORKERS=0 runs them in this process, one by one.
TEST_WORKERS ?= 2
test: install-dev
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) tests

# the unit tier alone, the inner loop while changing code: about a minute on 2 cores
test-fast: install-dev
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) tests/unit

bench: install
	$(PY) bench/bench_trainer.py

# torchwise check on real programs written by others (corpus/README.md): the table and the totals.
# Installs the extra packages some programs need (transformers, ignite, ...) into the same venv.
corpus: install-dev
	$(PY) corpus/run_corpus.py --install-needs --json corpus/results.json

clean:
	rm -rf $(VENV) torchwise-demo
