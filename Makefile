# torchneuron — the two commands a new machine needs are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all conformance lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,compile,ecosystem,zoo]'
	$(PY) -m torchneuron.native build || echo "warning: native device hooks not built (see docs/distributed.md)"
	touch $(STAMP)

demo: install  ## a real training run on the simulated NeuronCore
	$(PY) -m torchneuron.demo

test: install  ## the CI suite (fast tier; see `make test-all`)
	$(PY) -m pytest -q -m "not slow" tests

test-all: install  ## every test, including the slow ones
	$(PY) -m pytest -q tests

conformance: install  ## every OpInfo case on neuron vs CPU (long; `make test` runs the CI shard)
	nice -n 10 $(PY) -m pytest -q tests/conformance -p no:randomly --conformance-full

lint: install
	$(VENV)/bin/ruff check torchneuron torch_neuronx tests bench

bench: install  ## eager overhead vs CPU eager, figures for docs/performance.md
	$(PY) bench/eager_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
