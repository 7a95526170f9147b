"""The documentation: every code block runs and prints what the page shows, and the site builds cleanly.

The ```python blocks of one page run in order in one namespace (a page is a tutorial: later
blocks use what earlier ones defined), in a temporary working directory, with warnings
allowed (some pages demonstrate them). Fences may be indented (content tabs); ``text``
blocks are output, not code. A block that needs a benchmark data file that is not embedded
reads it from ``$FAIROPT_DATA`` (set to the test data directory when that exists) and the
page is skipped when the file is absent. A page with the comment ``<!-- docs-test: slow -->``
is marked slow.

The shell blocks (``bash``, ``sh``, ``shell``, ``console``) whose every command is the
library's CLI (``fairopt ...`` or ``python -m fairopt ...``) run after the page's python
blocks, in the same directory (so the files those wrote exist), as
``[sys.executable, "-m", "fairopt", ...]``; each must exit 0, and what they print on
standard output is compared with what the page shows (a following ``text`` block, or the
lines of a ``console`` block that do not start with ``$``). Every other shell block must be
marked ``<!-- not run: <why> -->`` right before its fence (installs, several processes,
benchmarks that take minutes): a shell block that is neither run nor marked fails the test.

Shown output is compared token by token, numbers within the rounding of the last digit
shown (:func:`output_differences`). Two stated exceptions: a line ``...`` stands for any
number of printed lines (the page shows an excerpt), and in shell output a duration
(a number followed by `` s``, e.g. ``(2.0 s)``) is not compared: the CLI prints how long
the fit took, which depends on the machine.

``test_site_builds`` runs ``mkdocs build --strict`` (a few seconds) when the ``docs`` extra
is installed, and checks the rendered API pages for Sphinx/reST leftovers.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
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
SHELL_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>bash|sh|shell|console)[^\n]*\n(?P<body>.*?)^(?P=indent)```",
                         re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>[^>\s][^>]*?)\s*-->[ \t]*\n(?:[ \t]*\n)*[ \t]*$")
ELISION = "..."
DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)? s\b")


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


@dataclass(frozen=True)
class ShellBlock:
    """A shell block of a page: the line its fence opens on, its commands (words, with
    comments and line continuations resolved), what the page shows it prints (None when
    nothing), and the reason given by a ``<!-- not run: ... -->`` mark before it (else None)."""

    line: int
    commands: tuple[tuple[str, ...], ...]
    shown: str | None
    not_run: str | None

    @property
    def runs(self) -> bool:
        """Whether the test runs it: not marked, and every command is the library's CLI."""
        return self.not_run is None and bool(self.commands) and all(cli_argv(c) for c in self.commands)


def cli_argv(words: tuple[str, ...]) -> list[str] | None:
    """The argument vector that runs a page's ``fairopt ...`` / ``python -m fairopt ...``
    command with this interpreter; None for any other command."""
    if words[:1] == ("fairopt",):
        return [sys.executable, "-m", "fairopt", *words[1:]]
    if len(words) >= 3 and Path(words[0]).name in ("python", "python3") and words[1:3] == ("-m", "fairopt"):
        return [sys.executable, "-m", "fairopt", *words[3:]]
    return None


def shell_blocks(text: str) -> list[ShellBlock]:
    """The shell blocks of a Markdown text, in order. In a ``console`` block the lines that
    start with ``$`` are commands and the others their output; in the other shell languages
    every line is a command and the output, if shown, is the ``text`` block that follows."""
    blocks = []
    for match in SHELL_FENCE.finditer(text):
        body = textwrap.dedent(match.group("body"))
        console = match.group("lang") == "console"
        commands, output, pending = [], [], ""
        for line in body.splitlines():
            if console and not pending and not line.startswith("$"):
                output.append(line)
                continue
            pending += (line[1:] if console and not pending else line).strip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            words = tuple(shlex.split(pending, comments=True))
            if words:
                commands.append(words)
            pending = ""
        following = OUTPUT.match(text, match.end())
        shown = "\n".join(output) if any(line.strip() for line in output) else (
            textwrap.dedent(following.group("body")) if following is not None else None)
        mark = NOT_RUN.search(text, 0, match.start())
        blocks.append(ShellBlock(line=text.count("\n", 0, match.start()) + 1, commands=tuple(commands),
                                 shown=shown, not_run=mark.group("why") if mark else None))
    return blocks


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
    (a page rounds; another platform's last digit may differ). A shown line ``...`` stands
    for any number of printed lines: the shown parts between elisions must appear in order,
    the first at the start and the last at the end unless an elision precedes or follows it."""
    if any(line.strip() == ELISION for line in shown.splitlines()):
        return _elided_differences(printed, shown, units)
    return _token_differences(printed, shown, units)


def _elided_differences(printed: str, shown: str, units: float) -> list[str]:
    """:func:`output_differences` of a shown excerpt: each part between ``...`` lines is
    matched against a run of consecutive printed lines (blank lines ignored on both sides),
    at the first place it fits after the previous part."""
    lines = [line for line in printed.splitlines() if line.strip()]
    parts: list[list[str]] = [[]]
    for line in shown.splitlines():
        if line.strip() == ELISION:
            parts.append([])
        elif line.strip():
            parts[-1].append(line)
    cursor = 0
    for i, part in enumerate(parts):
        if not part:
            continue
        first, last = i == 0, i == len(parts) - 1
        starts = [cursor] if first else ([len(lines) - len(part)] if last else range(cursor, len(lines)))
        found = next((start for start in starts if start >= cursor and start + len(part) <= len(lines)
                      and not _token_differences("\n".join(lines[start:start + len(part)]), "\n".join(part), units)),
                     None)
        if found is None:
            return [f"shown part {i + 1} of the excerpt ({part[0]!r} ...) is not printed"
                    f"{' at the start' if first else ' at the end' if last else ''}:\n{printed}"]
        cursor = found + len(part)
    return []


def _token_differences(printed: str, shown: str, units: float) -> list[str]:
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


def test_excerpts_and_durations_in_shown_output():
    printed = "# title\n\nrow a 0.81\nrow b 0.66\nrow c 0.50\n## part\nx 1\n"
    assert output_differences(printed, "# title\nrow a 0.81\n...\n## part\nx 1") == []
    assert output_differences(printed, "# title\n...\nrow c 0.50\n...") == []
    assert output_differences(printed, "row a 0.81\n...") != []  # the first part must start the output
    assert output_differences(printed, "...\nrow c 0.50") != []  # the last part must end it
    assert output_differences(printed, "# title\n...\n## part\ny 1") != []
    assert output_differences(printed, "# title\n...\nrow c 0.50\nrow b 0.66\n...") != []  # order counts
    shown, ran = "sqp: status converged (2.0 s). DI 0.810", "sqp: status converged (14.5 s). DI 0.810"
    assert output_differences(DURATION.sub("<s>", ran), DURATION.sub("<s>", shown)) == []
    assert output_differences(DURATION.sub("<s>", ran.replace("0.810", "0.790")), DURATION.sub("<s>", shown)) != []


def test_shell_block_extraction():
    text = ("```bash\nfairopt train --data a.csv \\\n    --constraint \"di:g>=0.8\"  # a comment\n```\n\n"
            "```text\nsqp on a.csv\n```\n"
            "<!-- not run: installs packages -->\n\n```bash\npip install fairopt\n```\n"
            "```sh\nmake install\n```\n"
            "```console\n$ python -m fairopt datasets\nadult  embedded\n```\n")
    train, pip, make, console = shell_blocks(text)
    assert train.commands == (("fairopt", "train", "--data", "a.csv", "--constraint", "di:g>=0.8"),)
    assert train.runs and train.shown == "sqp on a.csv\n" and train.line == 1
    assert cli_argv(train.commands[0])[:3] == [sys.executable, "-m", "fairopt"]
    assert pip.not_run == "installs packages" and not pip.runs
    assert make.not_run is None and not make.runs  # neither run nor marked: the page test fails on it
    assert console.runs and console.commands == (("python", "-m", "fairopt", "datasets"),)
    assert console.shown == "adult  embedded"


def test_every_shell_block_runs_or_is_marked():
    """No page skips a shell block silently: each is run by test_page_snippets_run or says why not."""
    unmarked = [f"{page.relative_to(DOCS)}:{block.line}" for page in PAGES
                for block in shell_blocks(page.read_text()) if not block.runs and block.not_run is None]
    assert not unmarked, "shell blocks neither run nor marked <!-- not run: <why> -->: " + ", ".join(unmarked)


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


def run_shell_blocks(page: Path, cwd: Path) -> None:
    """Run the shell blocks of ``page`` that the test runs (:attr:`ShellBlock.runs`) in
    ``cwd``; each command must exit 0, and a block whose output the page shows must print it
    on standard output (:func:`output_differences`, durations not compared). A block neither
    run nor marked ``<!-- not run: ... -->`` fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for block in shell_blocks(page.read_text()):
        where = f"{page.relative_to(DOCS)} [shell block at line {block.line}]"
        if block.not_run is not None:
            continue
        assert block.runs, f"{where} is neither run (its commands are not all `fairopt ...`) " \
                           "nor marked <!-- not run: <why> -->"
        printed = ""
        for words in block.commands:
            done = subprocess.run(cli_argv(words), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"{where}: {shlex.join(words)} exited {done.returncode}:\n" \
                                         + done.stdout[-2000:] + done.stderr[-3000:]
            printed += done.stdout
        sys.stdout.write(printed)
        if block.shown is not None:
            problems = output_differences(DURATION.sub("<seconds>", printed), DURATION.sub("<seconds>", block.shown))
            assert not problems, f"{where} prints other than the page shows: " + "; ".join(problems[:5])


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
    run_shell_blocks(page, tmp_path)


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
