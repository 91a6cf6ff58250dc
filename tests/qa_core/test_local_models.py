"""The `python -m qa_core.local_models` command line: it builds the model the test fixtures build, byte for byte."""

import subprocess
import sys
from pathlib import Path

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
