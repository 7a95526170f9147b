# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test install bench clean docs

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

# the documentation: installs the docs extra (mkdocs, mkdocstrings-python) into $(VENV),
# then builds docs/ into build/site; --strict fails on any warning (broken links, bad
# docstrings)
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) build *.egg-info
