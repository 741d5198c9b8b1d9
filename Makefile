# Both targets bootstrap .venv on a fresh machine (Python, a C compiler and the package index).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PLUGINS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
STAMP := $(VENV)/.byoc-installed

.PHONY: demo test fuzz lint clean export-models sweep-models

$(STAMP): pyproject.toml core/pyproject.toml $(addsuffix pyproject.toml,$(PLUGINS))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet --group dev -e "core[ray]" $(addprefix -e ,$(PLUGINS))
	touch $@

BYOC := $(VENV)/bin/byoc

demo: $(STAMP)
	@model=$$($(PY) -m byoc.testing.models P1) && set -e && \
	for cmd in "partition $$model -c docs/demo.toml" "run $$model -c docs/demo.toml" \
	           "compare $$model -c docs/demo.toml"; do \
		echo; echo "\$$ byoc $$cmd"; $(BYOC) $$cmd; \
	done

test: $(STAMP)
	$(PY) -m pytest -q

# core/tests/fuzz with Hypothesis' "fuzz" profile (core/tests/fuzz/conftest.py): thousands of
# fresh inputs per target, about ten minutes; `make test` runs the same targets on a fixed few
# hundred each. A failing input is kept in .hypothesis/ and tried first by the next run.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q core/tests/fuzz --hypothesis-show-statistics

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy

# bench/exported_models.py: models exported from PyTorch, for bench/zoo.py. torch never goes into
# .venv: the script makes a venv of its own, user_cache_dir("byoc")/export-venv (about 6 GB).
export-models: $(STAMP)
	$(PY) bench/exported_models.py

# bench/sweep_models.py: the models of bench/sweep.py (a correctness sweep), exported from PyTorch
# in the same venv as export-models.
sweep-models: $(STAMP)
	$(PY) bench/sweep_models.py

clean:
	rm -rf $(VENV)
