"""Griffe extension: turn the reST leftovers of the numpy-style docstrings into Markdown.

The docstrings of ``fairopt`` and ``solvers`` are written for Sphinx (numpydoc). Rendered
as Markdown by mkdocstrings, the Sphinx roles, literal-block markers and double backticks
would show as raw text. Once a package is loaded, before any docstring is parsed, this
extension rewrites every docstring's text:

- ``:class:`~a.b.C```, ``:func:``, ``:meth:``, ``:mod:``, ``:data:``, ``:attr:``,
  ``:obj:``, ``:exc:``, ``:const:`` (also ``:py:class:`` and so on) become an *optional*
  mkdocs-autorefs cross-reference, ``<autoref identifier="a.b.C" optional>`C`</autoref>``:
  a link when the object is rendered somewhere in the site, else inline code ``C`` (an
  unresolved optional reference is not a warning, so ``mkdocs build --strict`` passes).
  Targets are resolved like Sphinx does: a bare or dotted name is looked up in the scope of
  the documented object (its members, inherited members, then its parents' members and
  the module's imports), else taken as an absolute path; the identifier is the object's
  canonical path when Griffe knows it. ``~`` shows the last component, ``title <target>``
  shows the title, ``!name`` is never linked.
- ``:math:`x``` and unknown roles become inline code.
- A paragraph ending in ``::`` followed by an indented block becomes the paragraph ending
  in ``:`` (``::`` alone on its line disappears) and a fenced code block; ``.. math::``
  and ``.. code-block:: lang`` directives become fenced code blocks.
- ````x```` becomes ```x```.

The Python sources are not changed; enable it with the mkdocstrings-python option
``extensions: [docs/griffe_sphinx_roles.py]``.
"""

from __future__ import annotations

import ast
import html
import re
import textwrap
from typing import Any

from griffe import Extension, Module, Object

#: Sphinx roles of the Python domain that name an object (and can be linked)
XREF_ROLES = {"class", "func", "meth", "mod", "data", "attr", "obj", "exc", "const", "type"}

ROLE = re.compile(r":(?:py:)?(?P<role>[a-z][a-z-]*):`(?P<content>[^`]+)`")
DOUBLE_BACKTICKS = re.compile(r"(?<!`)``(?!`)(?P<code>[^`]+?)``(?!`)")
DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\.\s+(?P<name>[a-zA-Z-]+)::\s*(?P<argument>.*)$")
LITERAL_MARKER = re.compile(r"^(?P<indent>\s*)(?P<text>.*?)(?P<space>\s?)::\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
#: numpy sections whose unindented lines are ``name : type`` items; the parser renders
#: those lines' text as names and type annotations (code), not as Markdown
ITEM_SECTIONS = {
    "parameters", "other parameters", "type parameters", "returns", "yields", "receives",
    "raises", "warns", "attributes", "functions", "methods", "classes", "type aliases", "modules",
}


def _role_title(content: str) -> str:
    """The text Sphinx would show for a role's content (``~a.b.C`` -> ``C``)."""
    explicit = EXPLICIT_TITLE.match(content.strip())
    if explicit:
        return explicit["title"]
    target = content.strip().lstrip("!")
    if target.startswith("~"):
        return target.lstrip("~").rsplit(".", 1)[-1]
    return target.lstrip(".")


def plain_item_lines(text: str) -> str:
    """In the item sections of a numpy docstring (Parameters, Returns, ...), the item lines
    (``name : type``) lose their markup: roles become their title, backticks go."""
    lines = text.split("\n")
    in_items = False
    i = -1
    while i + 1 < len(lines):
        i += 1
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and nxt.strip() and set(nxt.strip()) == {"-"} and _indent(nxt) == _indent(line):
            # a section title: plain text, and a title wrapped over several lines is joined
            start = i
            while start > 0 and lines[start - 1].strip() and _indent(lines[start - 1]) == _indent(line) \
                    and not set(lines[start - 1].strip()) <= {"-"}:
                start -= 1
            title = " ".join(part.strip() for part in lines[start:i + 1])
            title = ROLE.sub(lambda m: _role_title(m["content"]), title).replace("`", "")
            lines[start:i + 1] = [" " * _indent(line) + title]
            i = start
            in_items = title.strip().lower() in ITEM_SECTIONS
            continue
        if set(line.strip()) == {"-"}:
            continue
        if in_items and line.strip() and not line.startswith(" "):
            plain = ROLE.sub(lambda m: _role_title(m["content"]), line)
            lines[i] = plain.replace("``", "").replace("`", "")
    return "\n".join(lines)


TABLE_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")


def _split_row(line: str, starts: list[int]) -> list[str]:
    """Cells of a simple-table row; a cell that overflows its column pushes the boundary
    to the next whitespace."""
    cells, position = [], 0
    for start in starts[1:]:
        cut = max(start - 1, position)
        while cut < len(line) and not line[cut].isspace():
            cut += 1
        cells.append(line[position:cut].strip())
        position = cut
    cells.append(line[position:].strip())
    return cells


def _escape_pipes(cell: str) -> str:
    """``|`` -> ``\\|`` outside code spans (a pipe inside a code span is no separator)."""
    parts = re.split(r"((`+).+?\2)", cell)
    # re.split with two groups yields text, span, backticks, text, span, backticks, ...
    out = []
    for index, part in enumerate(parts):
        if index % 3 == 0:
            out.append(part.replace("|", "\\|"))
        elif index % 3 == 1:
            out.append(part)
    return "".join(out)


def convert_simple_tables(text: str) -> str:
    """reST simple tables (``=====  =====`` borders) -> Markdown tables."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not TABLE_BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        border = lines[i]
        indent = " " * _indent(border)
        starts = [m.start() for m in re.finditer(r"=+", border)]
        borders, j = [i], i + 1
        while j < len(lines):
            if TABLE_BORDER.match(lines[j]):
                borders.append(j)
                if j + 1 >= len(lines) or not lines[j + 1].strip():
                    break
            j += 1
        if len(borders) < 2:  # not a table after all
            out.append(lines[i])
            i += 1
            continue
        rows: list[list[str]] = []
        header: list[str] | None = None
        for k in range(i + 1, borders[-1]):
            line = lines[k]
            if TABLE_BORDER.match(line):
                if header is None and rows:
                    header, rows = rows[0], []
                continue
            if not line.strip():
                continue
            cells = _split_row(line, starts)
            if rows and not cells[0]:  # continuation of the previous row
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            else:
                rows.append(cells)
        if header is None:
            header = [""] * len(starts)

        def row(cells: list[str]) -> str:
            return indent + "| " + " | ".join(_escape_pipes(c) for c in cells) + " |"

        out.extend(["", row(header), indent + "|" + "|".join(["---"] * len(starts)) + "|"])
        out.extend(row(r) for r in rows)
        out.append("")
        i = borders[-1] + 1
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _guess_language(body: str) -> str:
    """``python`` when the block parses as Python and looks like code, else ``text``."""
    try:
        ast.parse(body)
    except (SyntaxError, ValueError):
        return "text"
    return "python" if re.search(r"[=()\[\]]", body) else "text"


def _fenced(indent: str, language: str, body_lines: list[str]) -> list[str]:
    """A fenced block at ``indent``, blank lines around it, body dedented below it."""
    body = textwrap.dedent("\n".join(body_lines)).strip("\n")
    return ["", f"{indent}```{language}", *[f"{indent}{line}".rstrip() for line in body.split("\n")], f"{indent}```", ""]


def _indented_block(lines: list[str], start: int, base: int) -> tuple[list[str], int]:
    """The lines from ``start`` (blank lines skipped first) indented deeper than ``base``;
    returns them (trailing blank lines dropped) and the index after the block."""
    j = start
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j >= len(lines) or _indent(lines[j]) <= base:
        return [], start
    block_end = j
    while block_end < len(lines) and (not lines[block_end].strip() or _indent(lines[block_end]) > base):
        block_end += 1
    block = lines[j:block_end]
    while block and not block[-1].strip():
        block.pop()
    return block, block_end


def convert_blocks(text: str) -> list[tuple[bool, list[str]]]:
    """Split a docstring into runs of prose lines (True) and finished code lines (False),
    turning reST literal blocks and ``math``/``code-block`` directives into fences."""
    lines = text.split("\n")
    runs: list[tuple[bool, list[str]]] = []

    def emit(is_text: bool, new: list[str]) -> None:
        if runs and runs[-1][0] == is_text:
            runs[-1][1].extend(new)
        else:
            runs.append((is_text, list(new)))

    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):  # an existing Markdown fence: copy it verbatim
            in_fence = not in_fence
            emit(False, [line])
            i += 1
            continue
        if in_fence or line.lstrip().startswith(">>>"):
            emit(False, [line])
            i += 1
            continue
        directive = DIRECTIVE.match(line)
        if directive:
            name, argument = directive["name"].lower(), directive["argument"].strip()
            base = _indent(line)
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith(":") and _indent(lines[j]) > base:
                j += 1  # directive options such as :linenos:
            block, end = _indented_block(lines, j, base)
            if name == "math":
                body = ([argument] if argument else []) + block
                emit(False, _fenced(directive["indent"], "latex", body))
            elif name in ("code-block", "code", "sourcecode"):
                emit(False, _fenced(directive["indent"], argument or "text", block))
            else:  # an admonition (note, warning, ...): its text, without the directive line
                title = name.capitalize()
                emit(True, [f"{directive['indent']}**{title}.** {argument}".rstrip()])
                emit(True, [f"{directive['indent']}{b.strip()}" if b.strip() else "" for b in block])
            i = max(end, j)
            continue
        marker = LITERAL_MARKER.match(line)
        if marker and not line.lstrip().startswith(".."):
            block, end = _indented_block(lines, i + 1, _indent(line))
            prose = marker["text"]
            if prose:
                # "text::" -> "text:"; "text ::" -> "text"
                emit(True, [f"{marker['indent']}{prose}" + ("" if marker["space"] else ":")])
            if block:
                language = _guess_language(textwrap.dedent("\n".join(block)))
                emit(False, _fenced(marker["indent"], language, block))
                i = end
            else:
                i += 1
            continue
        emit(True, [line])
        i += 1
    return runs


class SphinxRoles(Extension):
    """Rewrite reST roles, literal blocks and double backticks of every docstring of a
    loaded package into Markdown and optional autorefs cross-references."""

    def on_package(self, *, pkg: Module, loader: Any, **kwargs: Any) -> None:
        seen: set[int] = set()
        self._walk(pkg, seen)

    # the name of the same event in Griffe versions before on_package existed
    def on_package_loaded(self, *, pkg: Module, **kwargs: Any) -> None:
        self.on_package(pkg=pkg, loader=None)

    def _walk(self, obj: Object, seen: set[int]) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        docstring = obj.docstring
        if docstring is not None and docstring.value and not getattr(docstring, "_sphinx_roles_done", False):
            docstring.value = self.rewrite(docstring.value, obj)
            docstring._sphinx_roles_done = True  # once, whichever package event ran first
        for member in obj.members.values():
            if member.is_alias:
                continue
            self._walk(member, seen)

    # ------------------------------------------------------------------------------------
    def rewrite(self, text: str, obj: Object) -> str:
        out: list[str] = []
        for is_text, lines in convert_blocks(plain_item_lines(convert_simple_tables(text))):
            if not is_text:
                out.extend(lines)
                continue
            prose = "\n".join(lines)
            prose = ROLE.sub(lambda m: self._role(m, obj), prose)
            prose = DOUBLE_BACKTICKS.sub(lambda m: f"`{m['code']}`", prose)
            out.extend(prose.split("\n"))
        # collapse the runs of blank lines that fences may leave behind
        result = re.sub(r"\n{3,}", "\n\n", "\n".join(out))
        return result.strip("\n")

    def _role(self, match: re.Match, obj: Object) -> str:
        role, content = match["role"], match["content"].strip()
        if role not in XREF_ROLES:
            return f"`{content}`"
        explicit = EXPLICIT_TITLE.match(content)
        if explicit:
            title, target = explicit["title"], explicit["target"].strip()
        else:
            title, target = None, content
        no_link = target.startswith("!")
        target = target.lstrip("!")
        short = target.startswith("~")
        target = target.lstrip("~").lstrip(".")
        if title is None:
            title = target.rsplit(".", 1)[-1] if short else target
        if no_link:
            return f"`{title}`"
        identifier = self._resolve(target, obj)
        if identifier is None:
            return f"`{title}`"
        return f'<autoref identifier="{html.escape(identifier, quote=True)}" optional>`{title}`</autoref>'

    @staticmethod
    def _resolve(target: str, obj: Object) -> str | None:
        """Full path of ``target`` as seen from ``obj``; None for an unknown bare name."""
        first, _, rest = target.partition(".")
        found: str | None = None
        inherited = False
        scope: Object | None = obj
        while scope is not None and found is None:
            try:
                members = scope.members
                if first in members:
                    member = members[first]
                    found = member.target_path if member.is_alias else member.path
                elif scope.is_class and any(first in base.members for base in scope.mro()):
                    found, inherited = f"{scope.path}.{first}", True
                elif scope.name == first and not scope.is_module:
                    found = scope.path
            except Exception:  # noqa: BLE001 - unresolvable bases or aliases: keep looking
                pass
            scope = scope.parent
        if found is None:
            if not rest:
                return None  # a bare name that is not in scope (a builtin, a parameter)
            found = target
        elif rest:
            found = f"{found}.{rest}"
        if inherited:  # rendered under the inheriting class: keep that path
            return found
        try:
            return obj.modules_collection[found].canonical_path
        except Exception:  # noqa: BLE001 - not loaded (yet) or not resolvable: as written
            return found
