"""
Sphinx configuration of the documentation site (`docs/`), built offline:

    .venv/bin/python -m sphinx -W --keep-going -n -b html docs out/docs

Sphinx with MyST-Parser (Markdown pages, as Ray's documentation is written) and autodoc (the Python API from the
docstrings); the furo theme, which ships its fonts and assets in its wheel. Nothing is fetched at build time: no
intersphinx, no remote assets.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # autodoc imports qa_core from the working tree

project = "ray-extractive-qa"
copyright = "the ray-extractive-qa authors; Apache-2.0"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# Other engineers' notes wait in incoming/ until they are folded into the pages; generate_reference.py is a script.
exclude_patterns = ["_build/**", "generate_reference.py"]

# MyST: heading anchors for `[text](page.md#anchor)` links, checked by the strict build, spelled as the HTML ids of
# the headings (`## python -m jobs.bulk_qa` -> `#python-m-jobs-bulk-qa`).
myst_heading_anchors = 4
myst_heading_slug_func = "docutils.nodes.make_id"
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
# The types autodoc names in signatures that live in libraries this site does not document (no intersphinx: the
# build is offline).
nitpick_ignore_regex = [
    ("py:class", r"(pathlib|collections\.abc|typing|torch|transformers|pyarrow|numpy)\..*"),
    # The embedding retriever's shards and search settings: the index's internals, described in their modules, not
    # on the API page.
    ("py:class", r"qa_core\.retrieval\.(dense\.DenseIndex|ann\.AnnSearch)"),
]

html_theme = "furo"
html_title = "ray-extractive-qa"
html_static_path: list[str] = []


# The docstrings are written in Markdown (inline code in single backticks, fenced examples, lists right under their
# paragraph) with reST field lists (`:param x:`); autodoc reads reST. This turns the Markdown parts into reST.
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _inline_to_rst(line: str) -> str:
    """Markdown inline code as reST literals (escaped where a word runs on), and `|` outside them escaped."""
    parts = []
    last = 0
    for match in INLINE_CODE.finditer(line):
        before = line[last : match.start()]
        parts.append(before.replace("|", "\\|"))
        literal = f"``{match.group(1)}``"
        if before and before[-1].isalnum():
            literal = "\\ " + literal
        if line[match.end() : match.end() + 1].isalnum():
            literal += "\\ "
        parts.append(literal)
        last = match.end()
    parts.append(line[last:].replace("|", "\\|"))
    return "".join(parts)


def markdown_docstring_to_rst(lines: list[str]) -> list[str]:
    """A docstring's lines with fenced blocks as code-block directives, inline code as literals, lists set apart."""
    converted: list[str] = []
    fence_indent: str | None = None
    for line in lines:
        fence = FENCE.match(line)
        if fence_indent is not None:  # inside a fenced block: kept verbatim, indented under the directive
            if fence and fence.group(1) == fence_indent and not fence.group(2):
                fence_indent = None
                converted.append("")
            else:
                converted.append(f"{fence_indent}   {line[len(fence_indent) :]}" if line.strip() else "")
            continue
        if fence:
            fence_indent = fence.group(1)
            converted += ["", f"{fence_indent}.. code-block:: {fence.group(2) or 'text'}", ""]
            continue
        starts_list = line.startswith("- ")
        previous = converted[-1] if converted else ""
        if starts_list and previous.strip() and not previous.startswith(("- ", " ")):
            converted.append("")  # reST wants a blank line before a list
        converted.append(_inline_to_rst(line))
    return converted


def _convert_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = markdown_docstring_to_rst(lines)


def setup(app):
    app.connect("autodoc-process-docstring", _convert_docstring)
