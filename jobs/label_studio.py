"""
`python -m jobs.label_studio push|pull`: a run's review tasks into a Label Studio project, and the reviews back.

- `push SOURCE --url URL --project PROJECT`: imports `label_studio.json` (SOURCE: a bulk-qa run's folder or the
  file) into the project (an id, or a title: a project of that title is created with the run's labelling config,
  `qa_core.annotation.LABEL_STUDIO_CONFIG`, when there is none). Idempotent: the project's tasks are listed first,
  page by page, and tasks whose `data.question_id` the project already holds are not imported again, so a second
  push adds no duplicates (and a push after a bigger `--review` adds only the new questions). Imported in batches.
- `pull --url URL --project PROJECT --to FILE [--format JSON|JSON_MIN]`: writes the project's export (every task,
  reviewed or not), streamed to FILE, then reads it back through `qa_core.question_files.read_questions` and
  prints what it holds, so that the file is known to be usable as `jobs.evaluate --gold`, `jobs.train --train` or
  `jobs.bulk_qa --questions` before it is used.

The token is read from the environment variable named by `--token-env` (default `LABEL_STUDIO_API_KEY`), never from
the command line, and is never printed or written. A legacy API token is sent as `Authorization: Token ...`; a
personal access token (a JWT refresh token, Label Studio 1.17+) is first exchanged for an access token.

Plain HTTP through `urllib`: the five endpoints used (projects, tasks listing, import, export, token refresh) do not
justify label-studio-sdk, whose 2.1.2 would bring some 25 packages into the project's environment (OpenCV, Faker,
black, a code generator) and move its numpy back to 2.2.

Exit status: 0 when done, 2 for bad input or a refused request (one line naming the request and the server's reason).
"""

import argparse
import json
import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qa_core.annotation import LABEL_STUDIO_CONFIG
from qa_core.question_files import read_questions
from qa_core.squad import SquadFormatError

TOKEN_ENV = "LABEL_STUDIO_API_KEY"
FORMATS = ("JSON", "JSON_MIN")
LIST_PAGE = 1000  # tasks a page when listing a project's question ids
IMPORT_BATCH = 2000  # tasks a request when importing
TIMEOUT_S = 600.0  # one request: an import batch or an export can take minutes on a big project


class LabelStudioError(Exception):
    """A request Label Studio refused or could not answer: one line, without the token."""


class LabelStudio:
    """
    A Label Studio server's REST API, as far as push and pull need it.

    :param url: The server, e.g. `http://127.0.0.1:8080`.
    :param token: A legacy API token or a personal access token (JWT refresh token).
    """

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self._authorization = f"Token {token}"
        if token.count(".") == 2:  # a JWT: a personal access token, exchanged for a short-lived access token
            access = self.request("POST", "/api/token/refresh", {"refresh": token}, authorized=False)["access"]
            self._authorization = f"Bearer {access}"

    def request(self, method: str, path: str, body: Any = None, authorized: bool = True) -> Any:
        """The JSON answer of one request (`None` for an empty one)."""
        with self._open(method, path, body, authorized) as response:
            text = response.read()
        return json.loads(text) if text else None

    def download(self, path: str, to: Path) -> None:
        """Streams a response into `to`, written to a temporary name first and renamed when complete."""
        partial = to.with_name(to.name + ".partial")
        with self._open("GET", path, None, True) as response, partial.open("wb") as file:
            shutil.copyfileobj(response, file, length=1 << 20)
        partial.replace(to)

    def _open(self, method: str, path: str, body: Any, authorized: bool):
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if authorized:
            headers["Authorization"] = self._authorization
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        where = f"{method} {self.url}{path.split('?')[0]}"
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as error:
            raise LabelStudioError(f"{where}: HTTP {error.code}: {_reason(error)}") from None
        except (urllib.error.URLError, OSError) as error:
            raise LabelStudioError(f"{where}: {getattr(error, 'reason', error)}") from None

    def project_id(self, project: str, create: bool) -> int:
        """The id of `project` (an id, or a title); with `create`, a new project of that title when none has it."""
        if project.isdigit():
            return int(project)
        for found in self._pages("/api/projects", "results"):
            if found.get("title") == project:
                return int(found["id"])
        if not create:
            raise LabelStudioError(f"{self.url}: no project titled {project!r}")
        created = self.request("POST", "/api/projects", {"title": project, "label_config": LABEL_STUDIO_CONFIG})
        return int(created["id"])

    def question_ids(self, project: int) -> set[str]:
        """The `data.question_id` of every task of the project, listed page by page."""
        path = f"/api/tasks?project={project}&fields=task_only&include=id,data"  # 5x faster than the full rows
        return {
            task["data"]["question_id"]
            for task in self._pages(path, "tasks")
            if isinstance(task.get("data"), dict) and isinstance(task["data"].get("question_id"), str)
        }

    def import_tasks(self, project: int, tasks: list[dict[str, Any]]) -> int:
        """Imports tasks with their predictions in batches; returns how many the server created."""
        created = 0
        for start in range(0, len(tasks), IMPORT_BATCH):
            answer = self.request(
                "POST", f"/api/projects/{project}/import?commit_to_project=true", tasks[start : start + IMPORT_BATCH]
            )
            created += int(answer.get("task_count", 0))
        return created

    def _pages(self, path: str, key: str) -> Iterator[dict[str, Any]]:
        separator = "&" if "?" in path else "?"
        page, seen = 1, 0
        while True:
            answer = self.request("GET", f"{path}{separator}page={page}&page_size={LIST_PAGE}")
            items = answer.get(key, []) if isinstance(answer, dict) else answer
            yield from items
            seen += len(items)
            total = answer.get("total", answer.get("count")) if isinstance(answer, dict) else None
            if not items or len(items) < LIST_PAGE or (total is not None and seen >= total):
                return
            page += 1


def _reason(error: urllib.error.HTTPError) -> str:
    """The server's reason for refusing, on one line and short (Label Studio answers JSON with `detail`)."""
    try:
        answer = json.loads(error.read() or b"{}")
    except (json.JSONDecodeError, OSError):
        answer = {}
    reason = answer.get("detail") or error.reason
    if answer.get("validation_errors"):
        reason = f"{reason}: {json.dumps(answer['validation_errors'], ensure_ascii=False)}"
    return " ".join(str(reason).split())[:300]


def read_tasks(source: Path) -> list[dict[str, Any]]:
    """The tasks of `label_studio.json`: `source` is the file or the run folder holding it."""
    path = source / "label_studio.json" if source.is_dir() else source
    try:
        tasks = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LabelStudioError(f"{path}: no such file (a bulk-qa run writes label_studio.json)") from None
    except json.JSONDecodeError as error:
        raise LabelStudioError(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
    bad = next((i for i, task in enumerate(tasks) if not _is_review_task(task)), None) if isinstance(tasks, list) else 0
    if bad is not None:
        raise LabelStudioError(f"{path}: task {bad} has no data.question_id (not a bulk-qa label_studio.json)")
    return tasks


def _is_review_task(task: Any) -> bool:
    return isinstance(task, dict) and isinstance(task.get("data"), dict) and "question_id" in task["data"]


def push(client: LabelStudio, source: Path, project: str) -> dict[str, int]:
    """Imports the tasks the project does not hold yet (by question id); returns the counts."""
    tasks = read_tasks(source)
    project_id = client.project_id(project, create=True)
    existing = client.question_ids(project_id)
    new = [task for task in tasks if task["data"]["question_id"] not in existing]
    created = client.import_tasks(project_id, new)
    return {"project": project_id, "imported": created, "already_there": len(tasks) - len(new)}


def pull(client: LabelStudio, project: str, to: Path, export_format: str) -> dict[str, Any]:
    """Writes the project's export to `to` and reads it back; returns the project id and what the file holds."""
    project_id = client.project_id(project, create=False)
    to.parent.mkdir(parents=True, exist_ok=True)
    client.download(f"/api/projects/{project_id}/export?exportType={export_format}&download_all_tasks=true", to)
    dataset = read_questions(to)
    if not dataset.has_gold:  # nothing reviewed yet: every task is an unlabelled question
        return {"project": project_id, "reviewed": 0, "unreviewed": len(dataset.examples)}
    return {"project": project_id, "reviewed": len(dataset.examples), "unreviewed": len(dataset.unreviewed)}


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m jobs.label_studio`."""
    parser = argparse.ArgumentParser(prog="python -m jobs.label_studio", description=__doc__.split("\n\n")[0].strip())
    commands = parser.add_subparsers(
        dest="command", required=True, help="what to do: push a run's tasks, or pull the reviews"
    )
    for name, help_text in (("push", "import a run's review tasks"), ("pull", "export the reviews to a file")):
        command = commands.add_parser(name, help=help_text)
        if name == "push":
            command.add_argument("source", type=Path, help="a bulk-qa run's folder, or its label_studio.json")
        command.add_argument("--url", required=True, help="the Label Studio server, e.g. http://127.0.0.1:8080")
        command.add_argument("--project", required=True, help="the project's id, or its title (push creates it)")
        command.add_argument("--token-env", default=TOKEN_ENV, help="the environment variable holding the API token")
        if name == "pull":
            command.add_argument("--to", required=True, type=Path, help="the export file to write (.json)")
            command.add_argument("--format", default="JSON", choices=FORMATS, help="Label Studio's export format")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    token = os.environ.get(args.token_env, "")
    if not token:
        print(
            f"jobs.label_studio: error: set the API token in the environment variable {args.token_env}", file=sys.stderr
        )
        return 2
    try:
        client = LabelStudio(args.url, token)
        if args.command == "push":
            counts = push(client, args.source, args.project)
            print(
                f"project {counts['project']}: {counts['imported']} task(s) imported, "
                f"{counts['already_there']} already there"
            )
        else:
            counts = pull(client, args.project, args.to, args.format)
            print(
                f"project {counts['project']}: {args.to} written, {counts['reviewed']} reviewed question(s), "
                f"{counts['unreviewed']} not reviewed yet"
            )
    except (LabelStudioError, SquadFormatError) as error:
        print(f"jobs.label_studio: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
