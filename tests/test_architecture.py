"""The layering is a checked contract: import-linter contracts and no private names across modules."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fairopt", "solvers")


def test_import_contracts_are_kept():
    """fairopt over solvers, no cycles inside a package, oracles independent of the engine, no
    training code under the metrics and measures (``[tool.importlinter]`` in pyproject.toml)."""
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    command = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    done = subprocess.run([command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout



#: Loads every module ``modules`` need, the ``__init__`` of each subpackage on the way included
#: (import-linter reads import statements only, not the package initialisers an import runs),
#: with the two top-level initialisers skipped: they import the whole library by design.
_LOADED = """
import importlib, sys, types
for name in ("fairopt", "solvers"):
    package = types.ModuleType(name)
    package.__path__ = [sys.argv[1] + "/" + name]
    sys.modules[name] = package
for module in sys.argv[2:]:
    importlib.import_module(module)
print(" ".join(sorted(sys.modules)))
"""


def test_metrics_and_measures_load_no_training_code():
    """The forbidden contract on ``fairopt.metrics`` and ``fairopt.measures`` holds at run time
    too: importing them loads none of its forbidden modules through a subpackage's
    ``__init__`` (as ``fairopt.report`` would load the persistence and the estimators)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c.get("source_modules") == ["fairopt.metrics", "fairopt.measures"])
    done = subprocess.run([sys.executable, "-c", _LOADED, str(ROOT), *contract["source_modules"]],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split()
    assert "fairopt.metrics" in loaded and "fairopt.measures.dcov" in loaded
    forbidden = [m for m in loaded for f in contract["forbidden_modules"] if m == f or m.startswith(f + ".")]
    assert forbidden == []


def test_import_fairopt_loads_no_experiment_or_paper_code():
    """``import fairopt`` loads neither the comparison tools (``fairopt.experiments``, on first
    use) nor the paper reproductions (``benchmarks.papers``, outside the package)."""
    code = "import fairopt, sys; print([m for m in sys.modules if 'experiments' in m or 'papers' in m])"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"

def _private_imports() -> list[str]:
    hits = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.module
                        and node.module.split(".")[0] in PACKAGES):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        hits.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {alias.name}")
    return hits


def test_no_private_name_is_imported_across_modules():
    """A name with a leading underscore stays in its module (modules named with one, such
    as ``fairopt.measures._dcov_kernels``, are private to their package and may be imported
    inside it)."""
    assert _private_imports() == []


#: Paths outside the repository that its text must never point to (the working notes and
#: the local copies of the papers are not part of the project; papers are cited by tag).
_OUTSIDE = ("shared/papers", "DESIGN" + ".md")


def test_no_file_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    hits = []
    for name in tracked.stdout.split():
        path = ROOT / name
        if name.startswith("tests/") or not path.is_file() or path.suffix in (".png", ".pt", ".gz", ".npy"):
            continue
        text = path.read_text(errors="ignore")
        hits += [f"{name}: {needle}" for needle in _OUTSIDE if needle in text]
    assert not hits, hits
