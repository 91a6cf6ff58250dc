"""
Every shell command of the tutorial and the how-to guides runs: each page's blocks run in order, in one workspace
shared by the pages (the sample data, the local model), as a user would run them from the repository root. A block
that needs a cluster says so with `<!-- docs:cluster-only -->` on the line before it and is left out.

The tutorial's block that builds the local model builds the workspace's, once, before any page runs; then the pages
run two at a time (their commands write to folders of their own), as most of their time is one process starting
Python, torch and the job, which leaves the second core idle.
"""

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.conftest import DOCS, ROOT

CLUSTER_ONLY = "<!-- docs:cluster-only -->"
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
GUIDES = [DOCS / "tutorial.md", *sorted((DOCS / "how-to").glob("*.md"))]
FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+)(?P<language>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)\s*$",
    re.MULTILINE | re.DOTALL,
)
# What the output of a clean run never holds: the model library's own load reports and progress bars.
LIBRARY_NOISE = ("LOAD REPORT", "Loading weights")
# The tutorial's block that builds the model every other block uses: run first, by the workspace.
MODEL_BLOCK = "python -m qa_core.local_models minilm models/minilm-qa"
# Pages whose blocks run at once (the machines the suite runs on have 2 cores).
PAGES_AT_ONCE = 2


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    commands: str
    cluster_only: bool


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start()) + 1
        body = "\n".join(row[len(match["indent"]) :] for row in match["body"].splitlines())
        found.append(Block(page.name, line, match["language"], body, before == CLUSTER_ONLY))
    return found


def test_every_shell_block_is_fenced_as_a_shell_and_every_marker_marks_one() -> None:
    """A command in a block of another language would escape the runs below; a marker must precede a shell block."""
    for page in GUIDES:
        text = page.read_text(encoding="utf-8")
        for block in blocks(page):
            if block.language not in SHELL_LANGUAGES and block.language != "python":
                assert not re.search(r"^\s*(python|ray|pip|kubectl|helm|aws)\b", block.commands, re.MULTILINE), (
                    f"{page.name}:{block.line}: commands in a ```{block.language} block: fence it as ```bash"
                )
        marked = sum(block.cluster_only for block in blocks(page))
        assert text.count(CLUSTER_ONLY) == marked, f"{page.name}: a {CLUSTER_ONLY} marker is not right above a block"


def runnable(page: Path) -> list[Block]:
    """The page's blocks that run here: shell blocks not marked cluster-only."""
    return [block for block in blocks(page) if block.language in SHELL_LANGUAGES and not block.cluster_only]


@dataclass(frozen=True)
class Workspace:
    """A folder laid out as the repository root for the commands, and the run of the block that built its model."""

    root: Path
    model_run: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """The sample data, and the local model, built by the tutorial's own block (the tutorial's test checks its run)."""
    root = tmp_path_factory.mktemp("guide")
    (root / "data").symlink_to(ROOT / "data")
    [model_block] = [block for block in runnable(DOCS / "tutorial.md") if block.commands.strip() == MODEL_BLOCK]
    return Workspace(root, run_block(model_block, root))


def run_environment() -> dict[str, str]:
    """This environment's `python` first on the PATH, and no cluster to join by accident."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RAY_ADDRESS")}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["HF_HUB_OFFLINE"] = "1"
    return environment


def run_block(block: Block, root: Path) -> subprocess.CompletedProcess:
    """The block's commands in one shell in `root`, stopping at the first that fails."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.commands],
        cwd=root,
        env=run_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_page(page: Path, workspace: Workspace) -> list[tuple[Block, subprocess.CompletedProcess]]:
    """Each block of the page with its run, in order, up to the first that fails; the model block's is the
    workspace's."""
    runs = []
    for block in runnable(page):
        result = workspace.model_run if block.commands.strip() == MODEL_BLOCK else run_block(block, workspace.root)
        runs.append((block, result))
        if result.returncode != 0:
            break
    return runs


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, workspace: Workspace) -> Iterator[dict[Path, Future]]:
    """The selected pages' runs, started `PAGES_AT_ONCE` at a time in page order, each test waiting for its own."""
    pages = [item.callspec.params["page"] for item in request.session.items
             if item.originalname == "test_the_guides_commands_run_on_the_sample_data"]  # fmt: skip
    with ThreadPoolExecutor(max_workers=PAGES_AT_ONCE) as pool:
        yield {page: pool.submit(run_page, page, workspace) for page in pages}


@pytest.mark.parametrize("page", GUIDES, ids=lambda page: str(page.relative_to(DOCS)))
def test_the_guides_commands_run_on_the_sample_data(page: Path, page_runs: dict[Path, Future]) -> None:
    for block, result in page_runs[page].result():  # every block, unless one fails
        where = f"{block.page}:{block.line}"
        assert result.returncode == 0, (
            f"{where} failed ({result.returncode}):\n{block.commands}\n{result.stderr[-3000:]}"
        )
        noise = [word for word in LIBRARY_NOISE if word in result.stdout + result.stderr]
        assert not noise, f"{where} printed the model library's {noise}:\n{result.stderr[-2000:]}"
