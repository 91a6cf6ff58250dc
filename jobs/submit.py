"""
Submit the bulk QA job to a Ray cluster, stream its logs, and exit with its outcome.

    python -m jobs.submit --address http://HEAD:8265 -- \\
        --questions s3://bucket/qa/questions.parquet --documents s3://bucket/qa/documents.parquet \\
        --output s3://bucket/qa/run-1 --num-actors 4 --gpus-per-actor 1

Everything after `--` is passed to `python -m jobs.bulk_qa` on the cluster. The job goes through Ray's Job
Submission API (the dashboard port, 8265) with a runtime environment that

- uploads this project as the job's working directory (code and configuration only: `WORKING_DIR_EXCLUDES`
  keeps the virtual environment, models, outputs and data out; Ray caps the upload at 512 MiB), and
- pip-installs the project's dependencies from `pyproject.toml` on every node the job uses, except Ray itself,
  which the cluster provides. `--no-install` skips this where the image already has them.

The same submission with Ray's own CLI, from the project root (see docs/how-to/clusters.md):

    ray job submit --address http://HEAD:8265 --working-dir . --runtime-env cluster/runtime-env.yaml \\
        -- python -m jobs.bulk_qa --questions ... --documents ... --output ...

Exit status: 0 when the job SUCCEEDED; the job's own exit status when its driver failed with one (2: unusable
input, as `python -m jobs.bulk_qa` locally); 1 for any other failure or a stopped job; 2 for bad arguments here.
With `--no-wait` it prints the submission id and exits 0 once the cluster has accepted the job.

Token authentication: a cluster that requires a token gets the one at hand, as `ray.init` does when it joins a
cluster: `RAY_AUTH_TOKEN`, the file `RAY_AUTH_TOKEN_PATH` names, or `~/.ray/auth_token`. `RAY_AUTH_MODE=disabled`
sends none.
"""

import argparse
import asyncio
import contextlib
import os
import re
import shlex
import sys
import time
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.job_submission import JobInfo, JobSubmissionClient

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
ENTRYPOINT = "python -m jobs.bulk_qa"
# gitignore-style patterns, relative to the working dir: what never travels with the job.
WORKING_DIR_EXCLUDES = [
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".ruff_cache",
    "/build",
    "/models",
    "/out",
    "/tests",
    # Data is read from storage, never uploaded; the small sample stays for smoke runs.
    "/data/*",
    "!/data/sample",
]
# Flags of jobs.bulk_qa whose values are output locations.
_OUTPUT_FLAGS = ("--output",)


def project_requirements(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    """
    The project's runtime dependencies, as pip requirements, without Ray: the cluster runs its own Ray, and a
    second one installed over it would not match the running cluster.

    :param pyproject: The project's `pyproject.toml`.
    :returns: The `[project] dependencies` entries, in order, less the `ray` one.
    """
    with pyproject.open("rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    return [requirement for requirement in dependencies if _requirement_name(requirement) != "ray"]


def _requirement_name(requirement: str) -> str:
    """The normalized distribution name of a pip requirement such as `ray[data]==2.60.0`."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if name is None:
        raise ValueError(f"not a pip requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", name.group(1)).lower()


def build_runtime_env(
    working_dir: Path,
    install: bool = True,
    extra_pip: list[str] | None = None,
    env_vars: dict[str, str] | None = None,
) -> dict:
    """
    The runtime environment the job runs in.

    :param working_dir: The project directory to upload as the job's working directory.
    :param install: Whether to pip-install the project's dependencies (from `working_dir`'s pyproject.toml).
    :param extra_pip: More pip requirements to install (with `install` or without it).
    :param env_vars: Environment variables for the job's driver and workers.
    :returns: A runtime environment dictionary for `JobSubmissionClient.submit_job`.
    """
    runtime_env: dict = {"working_dir": str(working_dir), "excludes": list(WORKING_DIR_EXCLUDES)}
    pip = project_requirements(working_dir / "pyproject.toml") if install else []
    pip += list(extra_pip or [])
    if pip:
        runtime_env["pip"] = pip
    if env_vars:
        runtime_env["env_vars"] = dict(env_vars)
    return runtime_env


def bulk_qa_entrypoint(job_args: list[str]) -> str:
    """The shell command that runs the bulk QA job with `job_args` on the cluster."""
    return " ".join([ENTRYPOINT, *(shlex.quote(arg) for arg in job_args)])


def _env_vars(specs: list[str]) -> dict[str, str]:
    """`NAME=VALUE` as given, `NAME` with its value in this environment."""
    env_vars = {}
    for spec in specs:
        name, separator, value = spec.partition("=")
        if not name:
            raise ValueError(f"--env {spec!r}: expected NAME or NAME=VALUE")
        if not separator:
            if name not in os.environ:
                raise ValueError(f"--env {name}: {name} is not set in this environment")
            value = os.environ[name]
        env_vars[name] = value
    return env_vars


def _use_token_if_available() -> None:
    """
    With `RAY_AUTH_MODE` unset and a token at hand, sends it (Ray's client sends none unless the mode is `token`,
    while `ray start` enables token authentication whenever its node has a token).
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    token_file = Path.home() / ".ray" / "auth_token"
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or token_file.is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


def _check_job_args(job_args: list[str], working_dir: Path) -> str | None:
    """
    What jobs.bulk_qa would refuse in its command line, before anything is sent: unknown flags (argparse exits
    with 2), then values, as the job checks them. A `--config` file is read from the working directory, where
    the job runs; one that is not there (a path only the cluster has) leaves only the flags to check here.

    :returns: The job's own error message, or None.
    """
    try:
        from jobs.bulk_qa.config import build_parser, load_config
        from jobs.storage import InputError
    except ImportError:  # the job's dependencies are not installed here: the cluster will check
        return None
    config_path = getattr(build_parser().parse_args(job_args), "config", None)
    if config_path is not None and not (working_dir / config_path).is_file():
        return None
    try:
        with contextlib.chdir(working_dir):
            load_config(job_args)
    except InputError as error:
        return str(error)
    return None


def _output_warnings(job_args: list[str]) -> list[str]:
    """Warnings for output locations that would land in the driver's temporary copy of the working dir."""
    warnings = []
    for index, arg in enumerate(job_args):
        flag, _, value = arg.partition("=")
        if flag not in _OUTPUT_FLAGS:
            continue
        if not value and index + 1 < len(job_args):
            value = job_args[index + 1]
        if value and "://" not in value and not os.path.isabs(value):
            warnings.append(
                f"{flag} {value} is relative: the job writes it inside its temporary copy of the working "
                "directory on the node that runs the driver. Use object storage (s3://, gs://, ...) or an "
                "absolute path on storage every node shares."
            )
    return warnings


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m jobs.submit [options] -- <jobs.bulk_qa arguments>`."""
    parser = argparse.ArgumentParser(
        prog="python -m jobs.submit",
        description="Submit the bulk QA job to a Ray cluster through the Job Submission API, stream its logs "
        "and exit with its outcome. Arguments after `--` go to `python -m jobs.bulk_qa` on the cluster.",
        usage="%(prog)s [options] -- <jobs.bulk_qa arguments>",
    )
    parser.add_argument(
        "--address",
        default=os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS,
        help="the cluster's Job Submission API, http://HEAD:8265 (default: $RAY_API_SERVER_ADDRESS, "
        f"$RAY_ADDRESS or {DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--working-dir",
        type=Path,
        help="the project directory uploaded as the job's working directory (not given: the folder holding this "
        "project's jobs/ and pyproject.toml, wherever the command is run from)",
    )
    parser.add_argument(
        "--no-install",
        dest="install",
        action="store_false",
        help="do not pip-install the project's dependencies: the cluster's image already has them (not given: the "
        "job installs them from pyproject.toml)",
    )
    parser.add_argument(
        "--pip",
        action="append",
        default=[],
        metavar="REQUIREMENT",
        help="one more pip requirement to install for the job (repeatable)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="an environment variable for the job's processes; NAME alone copies its value from here "
        "(repeatable). Values are stored with the job and visible in the dashboard: pass secrets through the "
        "cluster's own environment or credentials (instance roles, Kubernetes secrets) instead.",
    )
    parser.add_argument("--submission-id", help="an id for the job (default: one Ray generates)")
    parser.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="return once the job is submitted (not given: stream the job's logs until it ends and exit with its "
        "outcome)",
    )
    return parser


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Own options before the first `--`, the job's arguments after it."""
    if "--" not in argv:
        return argv, []
    split = argv.index("--")
    return argv[:split], argv[split + 1 :]


async def _stream_logs(client: "JobSubmissionClient", submission_id: str) -> None:
    async for lines in client.tail_job_logs(submission_id):
        print(lines, end="", flush=True)


def _follow(client: "JobSubmissionClient", submission_id: str, poll_s: float = 1.0) -> "JobInfo":
    """Streams the job's logs to stdout until it ends; returns its final `JobInfo`."""
    try:
        asyncio.run(_stream_logs(client, submission_id))
    except RuntimeError as error:  # the log stream broke before the job ended: wait for the end without logs
        print(f"jobs.submit: lost the log stream ({error}); waiting for the job to end", file=sys.stderr)
    while not (info := client.get_job_info(submission_id)).status.is_terminal():
        time.sleep(poll_s)
    return info


def exit_status(info: "JobInfo") -> int:
    """
    This command's exit status for a finished job.

    :param info: The job's final `JobInfo`.
    :returns: 0 if it succeeded; the driver's exit status if the driver failed with one; 1 otherwise.
    """
    from ray.job_submission import JobStatus

    if info.status == JobStatus.SUCCEEDED:
        return 0
    code = info.driver_exit_code
    if info.status == JobStatus.FAILED and isinstance(code, int) and 0 < code < 256:
        return code
    return 1


def main(argv: list[str] | None = None) -> int:
    """
    Submits the job and, unless `--no-wait`, streams its logs until it ends.

    :param argv: The command line after the program name (default: `sys.argv[1:]`).
    :returns: The exit status (see the module documentation).
    """
    own_args, job_args = _split_argv(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(own_args)
    if not job_args:
        parser.error("give the job's arguments after `--`, e.g. -- --questions Q --documents D --output OUT")
    working_dir = (args.working_dir or PROJECT_ROOT).resolve()
    if not (working_dir / "pyproject.toml").is_file() or not (working_dir / "jobs").is_dir():
        parser.error(f"--working-dir {working_dir} is not the project directory (no pyproject.toml and jobs/)")
    try:
        env_vars = _env_vars(args.env)
    except ValueError as error:
        parser.error(str(error))
    problem = _check_job_args(job_args, working_dir)
    if problem:
        print(f"jobs.submit: error: the job would refuse its arguments: {problem}", file=sys.stderr)
        return 2
    for warning in _output_warnings(job_args):
        print(f"jobs.submit: warning: {warning}", file=sys.stderr)

    # The explicit address wins: Ray's client would otherwise prefer these environment variables to it.
    os.environ.pop("RAY_API_SERVER_ADDRESS", None)
    os.environ.pop("RAY_ADDRESS", None)
    _use_token_if_available()
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        client = JobSubmissionClient(args.address)
        submission_id = client.submit_job(
            entrypoint=bulk_qa_entrypoint(job_args),
            runtime_env=build_runtime_env(working_dir, args.install, args.pip, env_vars),
            submission_id=args.submission_id,
        )
    except (AuthenticationError, ConnectionError, RuntimeError, ValueError) as error:
        print(f"jobs.submit: could not submit the job to {args.address}: {error}", file=sys.stderr)
        return 1
    print(f"jobs.submit: submitted {submission_id} to {args.address}", file=sys.stderr, flush=True)
    if not args.wait:
        print(submission_id)
        return 0
    try:
        info = _follow(client, submission_id)
    except KeyboardInterrupt:
        print(
            f"\njobs.submit: stopped following; the job keeps running. Stop it with: "
            f"ray job stop --address {args.address} {submission_id}",
            file=sys.stderr,
        )
        return 130
    status = exit_status(info)
    message = f"jobs.submit: job {submission_id} {info.status.value}"
    if info.status.value != "SUCCEEDED" and info.message:
        message += ": " + info.message.splitlines()[0]  # the rest repeats the logs streamed above
    print(message, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
