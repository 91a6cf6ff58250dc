"""
Every shell command of the tutorial and the how-to guides runs: each page's blocks run in order, in one workspace
shared by the pages (the sample data, the local model), as a user would run them from the repository root. A block
that needs a cluster says so with `<!-- docs:cluster-only -->` on the line before it and is left out.
"""

import os
import re
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, minilm_model: Path) -> Path:
    """A folder laid out as the repository root for the commands: the sample data, and the quick start's model."""
    root = tmp_path_factory.mktemp("guide")
    (root / "data").symlink_to(ROOT / "data")
    shutil.copytree(minilm_model, root / "models" / "minilm-qa")
    return root


def run_environment() -> dict[str, str]:
    """This environment's `python` first on the PATH, and no cluster to join by accident."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RAY_ADDRESS")}
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["HF_HUB_OFFLINE"] = "1"
    return environment


@pytest.mark.parametrize("page", GUIDES, ids=lambda page: str(page.relative_to(DOCS)))
def test_the_guides_commands_run_on_the_sample_data(page: Path, workspace: Path) -> None:
    runnable = [block for block in blocks(page) if block.language in SHELL_LANGUAGES and not block.cluster_only]
    for block in runnable:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.commands],
            cwd=workspace,
            env=run_environment(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        where = f"{block.page}:{block.line}"
        assert result.returncode == 0, (
            f"{where} failed ({result.returncode}):\n{block.commands}\n{result.stderr[-3000:]}"
        )
        noise = [word for word in LIBRARY_NOISE if word in result.stdout + result.stderr]
        assert not noise, f"{where} printed the model library's {noise}:\n{result.stderr[-2000:]}"
