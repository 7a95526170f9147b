# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first: the pinned CPU wheel lies on local disk; a bare `torch` requirement
# would otherwise pull a multi-GB CUDA build.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m fairopt.demo

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
