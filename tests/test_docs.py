"""Every ```python block of the documentation runs.

The blocks of one page run in order in one namespace (a page is a tutorial: later blocks
use what earlier ones defined), in a temporary working directory, with warnings allowed
(some pages demonstrate them). Blocks fenced as ``text`` or ``bash`` are not executed.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import pytest
import torch

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
PAGES = sorted(DOCS.rglob("*.md"))


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown text, in order."""
    return [match.group(1) for match in FENCE.finditer(text)]


def test_block_extraction():
    text = "intro\n```python\nx = 1\n```\n```text\nnot code\n```\n```python title=\"a\"\ny = x + 1\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]


def test_pages_exist_and_have_code():
    assert len(PAGES) >= 10
    with_code = [p for p in PAGES if python_blocks(p.read_text())]
    assert len(with_code) >= 8


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    matplotlib.use("Agg")
    yield
    torch.set_num_threads(threads)


def run_page(page: Path) -> dict:
    """Run the ```python blocks of ``page`` in order in one namespace; return it."""
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(python_blocks(page.read_text())):
        code = compile(block, f"{page.relative_to(DOCS)} [block {i + 1}]", "exec")
        exec(code, namespace)  # noqa: S102 - the documentation's own examples
    return namespace


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_snippets_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_page(page)


def test_custom_constraint_example_meets_its_budget(tmp_path, monkeypatch):
    """The custom-constraint guide's example, as written: a non-fairness constraint through
    the solvers.problem.Constraint protocol, a plain torch.nn.Linear trained by StochasticSQP;
    the budget binds and holds on the exact measure."""
    monkeypatch.chdir(tmp_path)
    namespace = run_page(DOCS / "guide" / "custom-constraints.md")
    model, budget, data, result = (namespace[k] for k in ("budgeted", "budget", "data", "result"))
    assert type(model) is torch.nn.Linear and model.out_features == 1
    with torch.no_grad():
        share = float((model(data.X) > 0).double().mean())  # by hand: rows predicted positive
    assert share <= budget.share == 0.2
    assert namespace["share_free"] > 0.4  # unconstrained, far over the budget: the constraint binds
    assert result.status == "converged" and result.info["c_exact"] == [share]
