"""jobs.submit without a cluster: the runtime environment it builds, what it uploads, and how it fails early."""

import os
import re
import tomllib
import zipfile
from pathlib import Path

import pytest
from ray._private.runtime_env.packaging import create_package
from ray.job_submission import JobInfo, JobStatus

from jobs import submit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_auth_mode(monkeypatch):
    """`submit.main` may set RAY_AUTH_MODE for its client; keep it out of the other tests."""
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)


def test_token_is_sent_when_one_is_at_hand(monkeypatch, tmp_path):
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    submit._use_token_if_available()
    assert "RAY_AUTH_MODE" not in os.environ
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("secret")
    submit._use_token_if_available()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    submit._use_token_if_available()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


def test_project_requirements_are_pyproject_dependencies_without_ray():
    with (ROOT / "pyproject.toml").open("rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    ray_pins = [d for d in dependencies if re.match(r"ray\s*(\[|==|>=|<|~=|$)", d)]
    assert len(ray_pins) == 1  # the cluster's own Ray, never installed over it
    requirements = submit.project_requirements(ROOT / "pyproject.toml")
    assert requirements == [d for d in dependencies if d not in ray_pins]
    assert any(r.startswith("torch") for r in requirements)
    assert any(r.startswith("transformers") for r in requirements)


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        ("ray[data]==2.60.0", "ray"),
        ("Ray>=2", "ray"),
        ("ray-extractive-qa", "ray-extractive-qa"),
        ("PyYAML>=6", "pyyaml"),
    ],
)
def test_requirement_name(requirement, name):
    assert submit._requirement_name(requirement) == name


def test_runtime_env_installs_the_project_dependencies_and_uploads_the_project():
    runtime_env = submit.build_runtime_env(ROOT)
    assert runtime_env["working_dir"] == str(ROOT)
    assert runtime_env["excludes"] == submit.WORKING_DIR_EXCLUDES
    assert runtime_env["pip"] == submit.project_requirements(ROOT / "pyproject.toml")
    assert "env_vars" not in runtime_env


def test_runtime_env_without_install_has_only_the_extra_requirements_and_env_vars():
    assert "pip" not in submit.build_runtime_env(ROOT, install=False)
    runtime_env = submit.build_runtime_env(ROOT, install=False, extra_pip=["s3fs"], env_vars={"HF_HOME": "/cache"})
    assert runtime_env["pip"] == ["s3fs"]
    assert runtime_env["env_vars"] == {"HF_HOME": "/cache"}


def test_working_dir_upload_holds_code_and_sample_but_no_data_models_or_environment(tmp_path):
    """Packs the project exactly as Ray packs a job's working dir (Ray's own packaging, same excludes)."""
    package = tmp_path / "working_dir.zip"
    create_package(str(ROOT), package, include_gitignore=True, excludes=submit.WORKING_DIR_EXCLUDES)
    names = set(zipfile.ZipFile(package).namelist())
    for needed in (
        "pyproject.toml",
        "jobs/bulk_qa/driver.py",
        "jobs/submit.py",
        "qa_core/reader.py",
        "data/sample/job.yaml",
    ):
        assert needed in names
    tops = {name.split("/")[0] for name in names}
    assert not tops & {".git", ".venv", "models", "out", "tests", "build"}
    assert not [name for name in names if name.startswith("data/") and not name.startswith("data/sample/")]
    assert not [name for name in names if "__pycache__" in name]
    assert package.stat().st_size < 5 * 1024**2  # Ray refuses uploads over 512 MiB; ours stay tiny


def test_entrypoint_quotes_the_job_arguments():
    entrypoint = submit.bulk_qa_entrypoint(["--questions", "s3://b/q x.parquet", "--answer-pattern", "A: (.*)$"])
    assert entrypoint == "python -m jobs.bulk_qa --questions 's3://b/q x.parquet' --answer-pattern 'A: (.*)$'"


def test_env_vars_copy_named_values_from_here(monkeypatch):
    monkeypatch.setenv("BULK_QA_TEST_VAR", "from-here")
    assert submit._env_vars(["BULK_QA_TEST_VAR", "OTHER=given"]) == {"BULK_QA_TEST_VAR": "from-here", "OTHER": "given"}
    monkeypatch.delenv("BULK_QA_TEST_VAR")
    with pytest.raises(ValueError, match="BULK_QA_TEST_VAR is not set"):
        submit._env_vars(["BULK_QA_TEST_VAR"])


def test_relative_output_is_warned_about():
    assert submit._output_warnings(["--output", "out/run"])
    assert submit._output_warnings(["--output=out/run"])
    assert not submit._output_warnings(["--output", "s3://bucket/run", "--questions", "q.parquet"])
    assert not submit._output_warnings(["--output", "/shared/run"])


def test_without_job_arguments_it_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--address", "http://127.0.0.1:9"])
    assert exit_info.value.code == 2
    assert "after `--`" in capsys.readouterr().err


def test_unknown_job_flag_is_rejected_before_submitting(capsys):
    # Nothing listens on port 9: reaching the submission step would print a connection error instead.
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--address", "http://127.0.0.1:9", "--", "--questions", "q.parquet", "--no-such-flag", "1"])
    assert exit_info.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_job_argument_values_are_checked_before_submitting(capsys):
    status = submit.main(["--address", "http://127.0.0.1:9", "--", "--questions", "q", "--top-k", "0"])
    assert status == 2
    err = capsys.readouterr().err
    assert "the job would refuse its arguments: Invalid configuration:" in err
    assert "--output is required" in err and "top_k must be >= 1, not 0" in err


def test_job_configuration_file_is_read_from_the_working_dir(capsys, tmp_path):
    working_dir = tmp_path / "project"
    (working_dir / "jobs").mkdir(parents=True)
    (working_dir / "pyproject.toml").write_text("")
    (working_dir / "job.yaml").write_text("output: /o\nreference_pattern: '(a)(b)'\n")
    job = ["--", "--config", "job.yaml", "--questions", "q"]
    status = submit.main(["--address", "http://127.0.0.1:9", "--working-dir", str(working_dir), *job])
    assert status == 2
    assert "reference_pattern: Pattern '(a)(b)' contains 2 capture groups" in capsys.readouterr().err
    # A file only the cluster has: the flags are checked here, the file there (so this reaches the submission).
    status = submit.main(["--address", "http://127.0.0.1:9", "--", "--config", "/cluster/job.yaml"])
    assert status == 1
    assert "could not submit the job to http://127.0.0.1:9" in capsys.readouterr().err


def test_missing_env_var_exits_2(capsys, monkeypatch):
    monkeypatch.delenv("BULK_QA_UNSET_VAR", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--env", "BULK_QA_UNSET_VAR", "--", "--questions", "q", "--output", "/o"])
    assert exit_info.value.code == 2
    assert "BULK_QA_UNSET_VAR is not set" in capsys.readouterr().err


def test_unreachable_cluster_exits_1(capsys):
    status = submit.main(["--address", "http://127.0.0.1:9", "--", "--questions", "q", "--output", "/o"])
    assert status == 1
    assert "could not submit the job to http://127.0.0.1:9" in capsys.readouterr().err


def test_explicit_address_wins_over_ray_address(monkeypatch, capsys):
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8")
    status = submit.main(["--address", "http://127.0.0.1:9", "--", "--questions", "q", "--output", "/o"])
    assert status == 1
    err = capsys.readouterr().err
    assert "http://127.0.0.1:9" in err and "127.0.0.1:8" not in err


@pytest.mark.parametrize(
    ("status", "driver_exit_code", "expected"),
    [
        (JobStatus.SUCCEEDED, 0, 0),
        (JobStatus.FAILED, 2, 2),  # unusable input, as `python -m jobs.bulk_qa` exits locally
        (JobStatus.FAILED, 1, 1),
        (JobStatus.FAILED, None, 1),  # e.g. the runtime environment could not be set up
        (JobStatus.STOPPED, None, 1),
    ],
)
def test_exit_status_follows_the_job(status, driver_exit_code, expected):
    info = JobInfo(status=status, entrypoint="python -m jobs.bulk_qa", driver_exit_code=driver_exit_code)
    assert submit.exit_status(info) == expected
