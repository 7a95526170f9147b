"""Every function of the fairopt package is shorter than 100 lines, docstring included (issue 32:
a newcomer reads a function at once; a longer one is split into named pieces)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 100


def _functions(package: str, root: Path = ROOT):
    """``(path, node)`` for every function definition of the modules under ``root / package``."""
    for path in sorted((root / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def _long_functions(package: str, root: Path = ROOT) -> list[str]:
    found = []
    for path, node in _functions(package, root):
        lines = node.end_lineno - node.lineno + 1
        if lines >= LIMIT:
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_fairopt_functions_are_under_100_lines():
    assert _long_functions("fairopt") == []


def test_the_check_finds_a_long_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (package / "long.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert _long_functions("pkg", tmp_path) == [f"pkg/long.py:1 long ({LIMIT + 1} lines)"]


def test_solvers_functions_are_under_100_lines():
    assert _long_functions("solvers") == []


def _wide_functions(package: str, limit: int = 8, root: Path = ROOT) -> list[str]:
    """Functions taking more than ``limit`` arguments (``self``/``cls`` not counted)."""
    found = []
    for path, node in _functions(package, root):
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
        count -= bool(names) and names[0] in ("self", "cls")
        if count > limit:
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({count} arguments)")
    return found


def test_the_sqp_engine_passes_typed_objects_not_long_argument_lists():
    """Issue 32: the engine's modules pass SQPState / FitProblem / SQPOptions, so no function of
    solvers/sqp takes more than 8 arguments and none annotates its state as a dict."""
    assert _wide_functions("solvers/sqp") == []
    dict_state = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "solvers" / "sqp").glob("*.py"))
                  for i, line in enumerate(p.read_text().splitlines(), 1) if "state: dict" in line]
    assert dict_state == []


def test_the_width_check_finds_a_wide_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "wide.py").write_text("def wide(a, b, c, d, e, f, g, h, i):\n    return a\n\n\n"
                                     "class K:\n    def ok(self, a, b, c, d, e, f, g, h):\n        return a\n")
    assert _wide_functions("pkg", root=tmp_path) == ["pkg/wide.py:1 wide (9 arguments)"]
