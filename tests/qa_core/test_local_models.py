"""The `python -m qa_core.local_models` command line: it builds the model the test fixtures build, byte for byte."""

import subprocess
import sys
from pathlib import Path

from qa_core.local_models import MEANINGLESS
from tests.conftest import ROOT


def test_command_line_builds_the_seeded_tiny_bert(tiny_bert_model: Path, tmp_path: Path) -> None:
    output = tmp_path / "tiny-bert"
    result = subprocess.run(
        [sys.executable, "-m", "qa_core.local_models", "tiny-bert", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(f"Built tiny-bert QA model in {output}. ")
    files = sorted(path.name for path in tiny_bert_model.iterdir())
    assert sorted(path.name for path in output.iterdir()) == files
    assert "model.safetensors" in files and "tokenizer.json" in files
    for name in files:  # seed 0 in both: the same weights and the same vocabulary, in another process
        assert (output / name).read_bytes() == (tiny_bert_model / name).read_bytes(), name


def build_minilm(output: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qa_core.local_models", "minilm", str(output), *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_clean_build_prints_only_its_own_line_and_verbose_shows_the_library(tmp_path: Path) -> None:
    """MiniLM's QA head is new, so transformers reports the missing and unexpected weights and draws progress bars:
    shown with --verbose only."""
    quiet = build_minilm(tmp_path / "quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert quiet.stdout.splitlines() == [f"Built minilm QA model in {tmp_path / 'quiet'}. {MEANINGLESS}"]
    verbose = build_minilm(tmp_path / "verbose", "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert "LOAD REPORT" in verbose.stderr and "Loading weights" in verbose.stderr
