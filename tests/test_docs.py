"""The documentation: every ```python block runs, and the site builds cleanly.

The blocks of one page run in order in one namespace (a page is a tutorial: later blocks
use what earlier ones defined), in a temporary working directory, with warnings allowed
(some pages demonstrate them). Fences may be indented (content tabs); blocks fenced as
``text`` or ``bash`` are not executed. A block that needs a benchmark data file that is
not embedded reads it from ``$FAIROPT_DATA`` (set to the test data directory when that
exists) and the page is skipped when the file is absent. A page with the comment
``<!-- docs-test: slow -->`` is marked slow.

``test_site_builds`` runs ``mkdocs build --strict`` (a few seconds) when the ``docs`` extra
is installed, and checks the rendered API pages for Sphinx/reST leftovers.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.MULTILINE | re.DOTALL)
PAGES = sorted(DOCS.rglob("*.md"))
SLOW_MARK = "<!-- docs-test: slow -->"
SHARED_DATA = Path(os.environ.get("FAIROPT_SHARED_DATA", ROOT / ".." / "shared" / "data")).resolve()


OUTPUT = re.compile(r"[ \t]*\n(?:[ \t]*\n)*(?P<indent>[ \t]*)```text[^\n]*\n(?P<body>.*?)^(?P=indent)```",
                    re.MULTILINE | re.DOTALL)
NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?%?$")


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown text, in order (indented
    fences, e.g. inside content tabs, are dedented)."""
    return [code for code, _ in blocks_and_outputs(text)]


def blocks_and_outputs(text: str) -> list[tuple[str, str | None]]:
    """Each ```python block with the ```text block that follows it with nothing but blank lines
    between (what the page says the block prints), or None."""
    pairs = []
    for match in FENCE.finditer(text):
        shown = OUTPUT.match(text, match.end())
        pairs.append((textwrap.dedent(match.group("body")),
                      textwrap.dedent(shown.group("body")) if shown is not None else None))
    return pairs


def _number(token: str) -> tuple[float, float] | None:
    """``(value, half a unit of its last printed digit)`` of a printed number, else None."""
    token = token.rstrip(",;:)").lstrip("(")
    if not NUMBER.match(token):
        return None
    percent = token.endswith("%")
    mantissa = token.rstrip("%").lower().split("e")[0]
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(token.rstrip("%").lower().split("e")[1]) if "e" in token.lower() else 0
    return float(token.rstrip("%")), 0.5 * 10.0 ** (exponent - digits) * (1 if not percent else 1)


def output_differences(printed: str, shown: str, units: float = 4.0) -> list[str]:
    """Where ``printed`` differs from what the page ``shown``: token by token (whitespace
    ignored), words equal, numbers within ``units`` halves of the shown number's last digit
    (a page rounds; another platform's last digit may differ)."""
    got, want = printed.split(), shown.split()
    if len(got) != len(want):
        return [f"{len(got)} tokens printed, {len(want)} shown:\n{printed}"]
    problems = []
    for a, b in zip(got, want):
        number_a, number_b = _number(a), _number(b)
        if number_a is not None and number_b is not None:
            if abs(number_a[0] - number_b[0]) > units * number_b[1] + 1e-12:
                problems.append(f"printed {a}, shown {b}")
        elif a != b:
            problems.append(f"printed {a!r}, shown {b!r}")
    return problems


def test_printed_output_comparison():
    text = "```python\nprint(1)\n```\n\n```text\nacc 0.830  DI 0.80\n```\n```python\nx = 1\n```\n"
    assert blocks_and_outputs(text) == [("print(1)\n", "acc 0.830  DI 0.80\n"), ("x = 1\n", None)]
    assert output_differences("acc 0.831  DI 0.80\n", "acc 0.830  DI 0.80") == []
    assert output_differences("acc 0.850  DI 0.80", "acc 0.830  DI 0.80") == ["printed 0.850, shown 0.830"]
    assert output_differences("ok True", "ok False") == ["printed 'True', shown 'False'"]
    assert output_differences("a b", "a") != []


def test_block_extraction():
    text = "intro\n```python\nx = 1\n```\n```text\nnot code\n```\n```python title=\"a\"\ny = x + 1\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]
    tabbed = '=== "a"\n\n    ```python\n    z = 2\n    if z:\n        z += 1\n    ```\n'
    assert python_blocks(tabbed) == ["z = 2\nif z:\n    z += 1\n"]


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
    """Run the ```python blocks of ``page`` in order in one namespace; return it. A block
    followed by a ```text block must print what it shows (:func:`output_differences`)."""
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, (block, shown) in enumerate(blocks_and_outputs(page.read_text())):
        where = f"{page.relative_to(DOCS)} [block {i + 1}]"
        code = compile(block, where, "exec")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)  # noqa: S102 - the documentation's own examples
        sys.stdout.write(printed.getvalue())
        if shown is not None:
            problems = output_differences(printed.getvalue(), shown)
            assert not problems, f"{where} prints other than the page shows: " + "; ".join(problems[:5])
    return namespace


def _page_param(page: Path):
    marks = [pytest.mark.slow] if SLOW_MARK in page.read_text() else []
    return pytest.param(page, marks=marks, id=str(page.relative_to(DOCS)))


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES])
def test_page_snippets_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "FAIROPT_DATA" not in os.environ and SHARED_DATA.is_dir():
        monkeypatch.setenv("FAIROPT_DATA", str(SHARED_DATA))
    try:
        run_page(page)
    except FileNotFoundError as error:
        if "fairopt does not download data" in str(error):  # the loaders' missing-file message
            pytest.skip(f"{page.name} needs a benchmark data file that is absent: {error}")
        raise


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


# --------------------------------------------------------------------------------------
# the built site
# --------------------------------------------------------------------------------------
ROLE_LEFTOVERS = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|obj|exc):`?")


def _visible_text(html: str) -> str:
    """The text of a page outside <pre>, <script> and tags (code blocks may show anything)."""
    html = re.sub(r"<(pre|script|style)\b.*?</\1>", "", html, flags=re.DOTALL)
    return re.sub(r"<[^>]+>", "", html)


def test_site_builds(tmp_path):
    """mkdocs build --strict passes; the API pages show no raw Sphinx roles, no reST
    literal markers or double backticks, no unprocessed cross-references, no pointers to
    files outside the repository."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "griffe"):
        pytest.importorskip(module, reason="the docs extra is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= len(PAGES)
    problems = []
    for page in pages:
        html = page.read_text()
        text = _visible_text(html)
        name = str(page.relative_to(site))
        problems += [f"{name}: role {m.group(0)!r}" for m in ROLE_LEFTOVERS.finditer(html)]
        problems += [f"{name}: {needle!r}" for needle in ("DESIGN.md", "&lt;autoref", "<autoref ", "../shared")
                     if needle in html]
        problems += [f"{name}: double backticks" for _ in re.finditer(r"(?<!`)``(?!`)", text)]
        problems += [f"{name}: literal marker {line.strip()!r}" for line in text.splitlines()
                     if line.rstrip().endswith("::")]
    assert not problems, "\n".join(problems[:40])
    api = (site / "api" / "constraints" / "index.html").read_text()
    assert 'class="autorefs autorefs-internal"' in api  # the roles became links
    assert (site / "images").is_dir() and list((site / "images").glob("*.png"))


def test_docs_stay_inside_the_repository():
    """Neither the README nor the docs point at a directory outside the repository."""
    for path in [ROOT / "README.md", *PAGES]:
        text = path.read_text()
        for needle in ("../shared", "shared/data"):
            assert needle not in text, f"{path.relative_to(ROOT)} mentions {needle}"


def test_sphinx_roles_extension():
    """The griffe extension that renders the numpy docstrings' reST (docs/griffe_sphinx_roles.py)."""
    griffe = pytest.importorskip("griffe", reason="the docs extra is not installed")
    sys.path.insert(0, str(DOCS))
    try:
        import griffe_sphinx_roles as roles
    finally:
        sys.path.remove(str(DOCS))
    code = '''
"""Module.

See :class:`~pkg.mod.Thing`, :func:`helper`, :meth:`Thing.run`, :mod:`pkg.mod`,
:class:`TypeError`, :math:`x^2`, :func:`!plain` and ``code``. Example::

    a = helper(1)

Table
-----
=====  =====
a      b
=====  =====
``x``  y|z
=====  =====
"""


def helper(x):
    """Double.

    Parameters
    ----------
    x : :class:`Thing`
        The value; see :meth:`Thing.run`.
    """
    return 2 * x


class Thing:
    def run(self):
        """Run."""
'''
    pkg = griffe.temporary_visited_package(
        "pkg", {"__init__.py": "", "mod.py": code}, extensions=griffe.load_extensions(roles.SphinxRoles)
    )
    with pkg as package:
        module_doc = package["mod"].docstring.value
        helper_doc = package["mod.helper"].docstring.value
    assert '<autoref identifier="pkg.mod.Thing" optional>`Thing`</autoref>' in module_doc
    assert '<autoref identifier="pkg.mod.helper" optional>`helper`</autoref>' in module_doc
    assert '<autoref identifier="pkg.mod.Thing.run" optional>`Thing.run`</autoref>' in module_doc
    assert '<autoref identifier="pkg.mod" optional>`pkg.mod`</autoref>' in module_doc
    assert "`TypeError`" in module_doc and "`x^2`" in module_doc and "`plain`" in module_doc
    assert not re.search(r"(?<!`)``(?!`)", module_doc) and "::" not in module_doc
    assert "Example:\n\n```python\na = helper(1)\n```" in module_doc
    assert "| a | b |" in module_doc and "| `x` | y\\|z |" in module_doc
    assert "x : Thing\n" in helper_doc  # the type of an item stays plain text
    assert '<autoref identifier="pkg.mod.Thing.run" optional>' in helper_doc
