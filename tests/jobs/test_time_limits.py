"""A job the tests start as a process fails its test at its time limit, with its output, instead of holding CI."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.conftest import communicate_within, run_process, wait_for_process

HANGS = "import time; print('reading shard 3', flush=True); time.sleep(60)"


def test_a_process_past_its_limit_is_killed_and_fails_with_its_output() -> None:
    with pytest.raises(pytest.fail.Exception) as failed:
        run_process([sys.executable, "-c", HANGS], 2)
    assert str(failed.value).startswith("still running after 2 s, killed: ")
    assert str(failed.value).endswith("\nreading shard 3\n")


def test_a_started_process_past_its_limit_is_killed_and_fails_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    process = subprocess.Popen([sys.executable, "-c", HANGS], stdout=log.open("w"), stderr=subprocess.STDOUT)
    with pytest.raises(pytest.fail.Exception) as failed:
        wait_for_process(process, 2, log)
    assert process.returncode is not None, "killed"
    assert str(failed.value).endswith("\nreading shard 3\n")


def test_a_piped_process_past_its_limit_is_killed_and_fails_with_its_output() -> None:
    command = [sys.executable, "-c", HANGS]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception) as failed:
        communicate_within(process, 2)
    assert process.returncode is not None, "killed"
    assert str(failed.value).endswith("\nreading shard 3\n")
