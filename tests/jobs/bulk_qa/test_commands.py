"""The job's installed console script, `bulk-qa` (pip install -e puts it next to this interpreter)."""

import re
import subprocess
import sys
from pathlib import Path

from tests.jobs.conftest import ROOT


def test_bulk_qa_console_script_lists_every_option() -> None:
    script = Path(sys.executable).parent / "bulk-qa"
    result = subprocess.run([str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: bulk-qa ")
    for flag in ("--questions", "--output", "--max-seq-length", "--no-answer", "--num-actors", "--overwrite"):
        assert re.search(rf"^  {flag}[ ,]", result.stdout, re.MULTILINE), flag
