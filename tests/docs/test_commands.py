"""
Every command of the tutorial, the install page, the how-to guides and the output-files page runs: each page's
shell and Python blocks run in order, in one workspace shared by the pages (the sample data, the local model), as a
user would run them from the repository root. A block that needs a cluster, or that downloads packages, says so with
`<!-- docs:cluster-only -->` or `<!-- docs:downloads -->` on the line before it and is left out. A ```text block
marked `<!-- docs:output -->` shows what the block before it prints: each of its lines must be in that output.

The tutorial's block that builds the local model builds the workspace's, once, before any page runs; then the pages
run two at a time (their commands write to folders of their own), as most of their time is one process starting
Python, torch and the job, which leaves the second core idle. Each page runs once per test session, whichever of
the tests below asks for its run first.
"""

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.conftest import DOCS, ROOT

CLUSTER_ONLY = "<!-- docs:cluster-only -->"
DOWNLOADS = "<!-- docs:downloads -->"  # a block that installs packages: the tests download nothing
NOT_RUN = (CLUSTER_ONLY, DOWNLOADS)
OUTPUT = "<!-- docs:output -->"
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
GUIDES = [
    DOCS / "tutorial.md",
    DOCS / "install.md",
    *sorted((DOCS / "how-to").glob("*.md")),
    DOCS / "output-files.md",
]
FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+)(?P<language>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)\s*$",
    re.MULTILINE | re.DOTALL,
)
# What the output of a clean run of a command never holds: the model library's own load reports and progress bars
# (a Python block calling a component, as in a notebook, shows what the library prints there).
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
    marker: str  # the line right above the block (a `<!-- docs:... -->` marker, or other text)

    @property
    def runs(self) -> bool:
        """A shell or Python block not marked as needing a cluster or downloads."""
        return self.language in (*SHELL_LANGUAGES, "python") and self.marker not in NOT_RUN


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start()) + 1
        body = "\n".join(row[len(match["indent"]) :] for row in match["body"].splitlines())
        found.append(Block(page.name, line, match["language"], body, before))
    return found


def test_every_shell_block_is_fenced_as_a_shell_and_every_marker_marks_one() -> None:
    """A command in a block of another language would escape the runs below; a marker must precede a shell block,
    and an output marker a text block that follows a block that runs."""
    for page in GUIDES:
        text = page.read_text(encoding="utf-8")
        found = blocks(page)
        for block in found:
            if block.language not in SHELL_LANGUAGES and block.language != "python":
                assert not re.search(r"^\s*(python|ray|pip|kubectl|helm|aws)\b", block.commands, re.MULTILINE), (
                    f"{page.name}:{block.line}: commands in a ```{block.language} block: fence it as ```bash"
                )
        for marker in NOT_RUN:
            marked = sum(block.marker == marker and block.language in SHELL_LANGUAGES for block in found)
            assert text.count(marker) == marked, f"{page.name}: a {marker} marker is not right above a shell block"
        outputs = [(index, block) for index, block in enumerate(found) if block.marker == OUTPUT]
        assert text.count(OUTPUT) == len(outputs), f"{page.name}: a {OUTPUT} marker is not right above a block"
        for index, block in outputs:
            assert block.language == "text" and index > 0 and found[index - 1].runs, (
                f"{page.name}:{block.line}: {OUTPUT} must mark a ```text block after a block that runs"
            )


def runnable(page: Path) -> list[Block]:
    """The page's blocks that run here: shell and Python blocks not marked as needing a cluster or downloads."""
    return [block for block in blocks(page) if block.runs]


def shown_outputs(page: Path) -> dict[Block, Block]:
    """The page's output blocks, by the block whose output each shows."""
    found = blocks(page)
    return {found[index - 1]: block for index, block in enumerate(found) if block.marker == OUTPUT}


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
    """This environment's `python` first on the PATH, importing this checkout's code (whichever checkout the
    environment was installed from), no cluster to join by accident, and the model hub at its usual address but
    offline."""
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("RAY_ADDRESS") and key != "HF_ENDPOINT"
    }
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    environment["HF_HUB_OFFLINE"] = "1"
    return environment


def run_block(block: Block, root: Path) -> subprocess.CompletedProcess:
    """The block's commands in one shell in `root`, stopping at the first that fails; a Python block in `python`."""
    shell = block.language != "python"
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.commands] if shell else ["python", "-"],
        input=None if shell else block.commands,
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


class PageRuns:
    """The pages' runs, each started once, `PAGES_AT_ONCE` at a time: those the session's tests ask for first, in
    page order, then any other a test asks for."""

    def __init__(self, pool: ThreadPoolExecutor, workspace: Workspace) -> None:
        self.pool, self.workspace = pool, workspace
        self.started: dict[Path, Future] = {}
        self.lock = threading.Lock()

    def start(self, page: Path) -> Future:
        with self.lock:
            if page not in self.started:
                self.started[page] = self.pool.submit(run_page, page, self.workspace)
            return self.started[page]

    def __getitem__(self, page: Path) -> list[tuple[Block, subprocess.CompletedProcess]]:
        return self.start(page).result()


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, workspace: Workspace) -> Iterator[PageRuns]:
    with ThreadPoolExecutor(max_workers=PAGES_AT_ONCE) as pool:
        runs = PageRuns(pool, workspace)
        for item in request.session.items:
            if item.originalname == "test_the_guides_commands_run_on_the_sample_data":
                runs.start(item.callspec.params["page"])
        yield runs


@pytest.mark.parametrize("page", GUIDES, ids=lambda page: str(page.relative_to(DOCS)))
def test_the_guides_commands_run_on_the_sample_data(page: Path, page_runs: PageRuns) -> None:
    outputs = shown_outputs(page)
    for block, result in page_runs[page]:  # every block, unless one fails
        where = f"{block.page}:{block.line}"
        assert result.returncode == 0, (
            f"{where} failed ({result.returncode}):\n{block.commands}\n{result.stderr[-3000:]}"
        )
        printed = result.stdout + result.stderr
        noise = [word for word in LIBRARY_NOISE if word in printed] if block.language != "python" else []
        assert not noise, f"{where} printed the model library's {noise}:\n{result.stderr[-2000:]}"
        if block in outputs:
            printed = [line.rstrip() for line in (result.stdout + result.stderr).splitlines()]
            for line in filter(None, (line.rstrip() for line in outputs[block].commands.splitlines())):
                assert line in printed, f"{where} did not print, as the page shows:\n{line}\nbut:\n{result.stdout}"
