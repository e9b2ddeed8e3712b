# Every target bootstraps .venv with what it needs; the first two are the README's set-up commands.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
JOBS ?= 2

.PHONY: demo test bench examples clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-%: pyproject.toml | $(PY)
	$(PIP) -e ".[$*]"
	touch $@

demo: $(VENV)/.installed-examples
	$(PY) examples/quickstart.py

# pytest exits 5 when it collects nothing: that is a failure here, never a pass. worksteal:
# a worker that runs out of tests takes some of the other's, so a slow sweep near the end does
# not leave a core idle.
test: $(VENV)/.installed-test
	$(PY) -m pytest -n $(JOBS) --dist worksteal -q

bench: $(VENV)/.installed-bench
	$(PY) -m benchmarks.run $(BENCH_ARGS)

examples: $(VENV)/.installed-examples
	$(PY) examples/quickstart.py
	$(PY) examples/flax_training.py
	$(PY) examples/crop_and_resize_boxes.py
	$(PY) examples/affine_registration.py
	$(PY) examples/sharded.py

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache
