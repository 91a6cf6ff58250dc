"""
The review loop against a real Label Studio (PyPI `label-studio`, in its own environment `.venv-ls/`: see the
README's test command): one server for the module, on 127.0.0.1, with prediction validation switched on. Tasks are
pushed with `jobs.label_studio`, reviewed through the server's API (accepted, corrected, "No answer", cancelled, two
annotators), pulled as JSON and JSON-MIN and read back by `qa_core.annotation` on contexts with emoji and other
characters outside the BMP.
"""

import asyncio
import dataclasses
import http.cookiejar
import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs import label_studio as cli
from jobs.label_studio import LabelStudio, pull, push
from qa_core.annotation import PredictedSpan, Prediction, label_studio_tasks, squad_predictions
from qa_core.evaluation import evaluate
from qa_core.question_files import read_questions
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample, squad_json
from tests.cluster.cluster_testing import free_port
from tests.jobs.browser import CHROMIUM, Page, browser_page
from tests.qa_core.reference import squad_v2_official

LABEL_STUDIO = Path(__file__).resolve().parents[2] / ".venv-ls" / "bin" / "label-studio"
TOKEN = "loop-test-token-0123456789"  # the admin's legacy API token, set at start-up
EMAIL, PASSWORD = "reviewer@example.com", "review-loop-password"  # the admin's, to log in with a browser
START_TIMEOUT_S = 600  # a first start migrates a new database: about 100 s on the 2-core machine


@dataclass(frozen=True)
class Server:
    url: str
    log: Path
    started_in_s: float


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    """A Label Studio of its own on a free loopback port and a new data folder; its process group stopped after."""
    if not LABEL_STUDIO.exists():
        pytest.fail(
            f"{LABEL_STUDIO} is missing: python3 -m venv .venv-ls && "
            '.venv-ls/bin/pip install "label-studio==1.23.2" "sentry-sdk<3"'
        )
    data = tmp_path_factory.mktemp("label-studio")
    port = free_port()
    env = {
        **os.environ,
        "LABEL_STUDIO_BASE_DATA_DIR": str(data),
        "LABEL_STUDIO_USERNAME": EMAIL,
        "LABEL_STUDIO_PASSWORD": PASSWORD,
        "LABEL_STUDIO_USER_TOKEN": TOKEN,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        # Invalid predictions fail the import instead of being logged.
        "fflag_feat_utc_210_prediction_validation_15082025": "true",
    }
    log = data / "server.log"
    command = [str(LABEL_STUDIO), "start", "--internal-host", "127.0.0.1", "--port", str(port), "--no-browser"]
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=data, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    started = time.monotonic()
    url = f"http://127.0.0.1:{port}"
    try:
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                pytest.fail(f"Label Studio did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(1)
        yield Server(url, log, time.monotonic() - started)
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # its own process group only
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


# Contexts with characters outside the BMP (one UTF-16 unit each would be two), a ZWJ sequence and a flag.
NILE = "🐊 The Nile 👨‍👩‍👧 flows north. 𝔘nicode 🇫🇷 live in it."
LOIRE = "The Loire 🏞️ rises in the Massif Central and flows 1,006 km."


def span(context: str, text: str, score: float) -> PredictedSpan:
    return PredictedSpan(text, context.index(text), score, "doc-nile" if context == NILE else "doc-loire")


def answered(context: str, text: str, score: float, no_answer: float = 0.1) -> Prediction:
    return Prediction("answered", text, no_answer, [span(context, text, score)])


QUESTIONS = {  # id: (context, question, prediction, review)
    "accept": (NILE, "Which way does it flow?", dataclasses.replace(
        answered(NILE, "flows north", 0.9), spans=[span(NILE, "flows north", 0.9), span(NILE, "The Nile", 0.2)]),
        "accept"),
    "emoji": (NILE, "What lives in it?", answered(NILE, "𝔘nicode", 0.6, 0.2), "accept"),
    "refused": (LOIRE, "Who named it?", Prediction("refused", None, 0.8, [span(LOIRE, "The Loire", 0.5)]), "accept"),
    "unread": (LOIRE, "How deep is it?", Prediction("no_documents", None, None), "accept"),
    "correct": (NILE, "Who lives in it?", answered(NILE, "The Nile", 0.4, 0.3), "🇫🇷 live"),
    "no-answer": (LOIRE, "Who owns it?", answered(LOIRE, "Massif Central", 0.3, 0.4), "no answer"),
    "cancel": (LOIRE, "How long is it?", answered(LOIRE, "1,006 km", 0.8), "cancel"),
    "two": (LOIRE, "Where does it rise?", answered(LOIRE, "Massif Central", 0.7), "two"),
}  # fmt: skip
EXPECTED = {  # the gold the reviews make: (answers, is_impossible); "cancel" has no review left
    "accept": ([GoldAnswer("flows north", NILE.index("flows north"))], False),
    "emoji": ([GoldAnswer("𝔘nicode", NILE.index("𝔘nicode"))], False),
    "refused": ([], True),
    "unread": ([], True),
    "correct": ([GoldAnswer("🇫🇷 live", NILE.index("🇫🇷 live"))], False),
    "no-answer": ([], True),
    "two": ([GoldAnswer("Massif Central", LOIRE.index("Massif Central")),
             GoldAnswer("the Massif Central", LOIRE.index("the Massif Central"))], False),
}  # fmt: skip


def review_tasks(tmp_path: Path) -> Path:
    """The questions' `label_studio.json`, as a run writes it."""
    dataset = SquadDataset([SquadExample(qid, None, q, c) for qid, (c, q, _, _) in QUESTIONS.items()], "2.0", False)
    tasks = label_studio_tasks(dataset, {qid: entry[2] for qid, entry in QUESTIONS.items()}, "tiny@0123456789ab")
    path = tmp_path / "label_studio.json"
    path.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    return path


def labels(context: str, text: str) -> list[dict]:
    start = context.index(text)
    value = {"start": start, "end": start + len(text), "text": text, "labels": ["Answer"]}
    return [{"from_name": "answer", "to_name": "context", "type": "labels", "value": value}]


NO_ANSWER = [{"from_name": "no_answer", "to_name": "context", "type": "choices", "value": {"choices": ["No answer"]}}]


def review(client: LabelStudio, project: int) -> None:
    """Reviews every task through the API as QUESTIONS say, as two users."""
    second = client.request("POST", "/api/users", {"email": "second@example.com", "username": "second"})["id"]
    predictions = {p["task"]: p["result"] for p in client.request("GET", f"/api/predictions?project={project}")}
    for task in client.request("GET", f"/api/tasks?project={project}&fields=task_only&page_size=100")["tasks"]:
        qid = task["data"]["question_id"]
        context, _, _, what = QUESTIONS[qid]
        path = f"/api/tasks/{task['id']}/annotations"
        accepted = {"result": predictions[task["id"]], "was_cancelled": False}
        if what == "accept":
            client.request("POST", path, accepted)
        elif what == "no answer":
            client.request("POST", path, {"result": NO_ANSWER})
        elif what == "cancel":
            client.request("POST", path, {"result": [], "was_cancelled": True})
        elif what == "two":
            client.request("POST", path, accepted)
            client.request("POST", path, {"result": labels(context, "the Massif Central"), "completed_by": second})
        else:  # a corrected span
            client.request("POST", path, {"result": labels(context, what)})


@pytest.fixture(scope="module")
def reviewed(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A project pushed twice from `label_studio.json`, reviewed, and the log lines its import wrote."""
    folder = tmp_path_factory.mktemp("loop")
    tasks = review_tasks(folder)
    client = LabelStudio(server.url, TOKEN)
    logged = server.log.stat().st_size
    first = push(client, tasks, "Review loop")
    import_log = server.log.read_bytes()[logged:].decode(errors="replace")
    second = push(client, tasks, "Review loop")
    review(client, first["project"])
    return {"client": client, "folder": folder, "tasks": tasks, "pushes": (first, second), "import_log": import_log}


def test_tasks_import_with_validation_on_and_a_second_push_adds_nothing(server: Server, reviewed: dict) -> None:
    print(f"Label Studio started in {server.started_in_s:.1f} s")
    first, second = reviewed["pushes"]
    assert (first["imported"], first["already_there"]) == (8, 0)
    assert (second["project"], second["imported"], second["already_there"]) == (first["project"], 0, 8)
    assert not [line for line in reviewed["import_log"].splitlines() if "WARNING" in line or "ERROR" in line]
    client = reviewed["client"]
    project = client.request("GET", f"/api/projects/{first['project']}")
    assert (project["task_number"], project["total_predictions_number"]) == (8, 8)
    # The server keeps the predictions' offsets and texts as written (code points), the refusal as "No answer".
    sent = {t["data"]["question_id"]: t["predictions"][0] for t in json.loads(reviewed["tasks"].read_text())}
    stored = client.request("GET", f"/api/tasks?project={first['project']}&fields=task_only&page_size=100")["tasks"]
    ids = {task["id"]: task["data"]["question_id"] for task in stored}
    for prediction in client.request("GET", f"/api/predictions?project={first['project']}"):
        qid = ids[prediction["task"]]
        assert (prediction["result"], prediction["score"]) == (sent[qid]["result"], sent[qid]["score"])
        assert prediction["model_version"] == "tiny@0123456789ab"
        for region in prediction["result"]:
            if region["type"] == "labels":
                context = QUESTIONS[qid][0]
                assert context[region["value"]["start"] : region["value"]["end"]] == region["value"]["text"]
    assert [r["value"] for r in sent["refused"]["result"]] == [{"choices": ["No answer"]}]


@pytest.mark.parametrize("export_format", ["JSON", "JSON_MIN"])
def test_reviews_pulled_read_back_as_gold(reviewed: dict, export_format: str) -> None:
    path = reviewed["folder"] / f"export-{export_format}.json"
    counts = pull(reviewed["client"], "Review loop", path, export_format)
    back = read_questions(path)
    assert {e.id: (e.answers, e.is_impossible) for e in back.examples} == EXPECTED
    # JSON lists the task whose only annotation was cancelled as unreviewed; JSON-MIN leaves it out of the file.
    assert back.unreviewed == (["cancel"] if export_format == "JSON" else [])
    assert counts["reviewed"] == 7
    for example in back.examples:
        assert example.context == QUESTIONS[example.id][0]


def test_reviewed_gold_scores_as_the_official_script(reviewed: dict) -> None:
    path = reviewed["folder"] / "export.json"
    pull(reviewed["client"], "Review loop", path, "JSON")
    gold = read_questions(path)
    answers, na_probs = squad_predictions({qid: entry[2] for qid, entry in QUESTIONS.items() if qid != "cancel"})
    ours = evaluate(gold, answers, na_probs)
    accepted = [qid for qid, entry in QUESTIONS.items() if entry[3] in ("accept", "two")]
    assert all(ours["exact"][qid] == 1.0 for qid in accepted)  # EM 100 on the accepted predictions
    theirs, _, _ = squad_v2_official.official_eval(squad_json(gold)["data"], answers, na_probs)
    assert {key: ours["metrics"][key] for key in theirs} == pytest.approx(theirs, abs=1e-9, rel=0)
    assert ours["metrics"]["exact"] == pytest.approx(100 * 5 / 7)  # "correct" and "no-answer" are missed


def test_the_command_line_never_shows_the_token(server: Server, reviewed: dict, monkeypatch, capsys) -> None:
    monkeypatch.setenv("REVIEW_TOKEN", TOKEN)
    args = ["--url", server.url, "--project", "Review loop", "--token-env", "REVIEW_TOKEN"]
    assert cli.main(["push", str(reviewed["tasks"]), *args]) == 0
    assert cli.main(["pull", *args, "--to", str(reviewed["folder"] / "cli.json"), "--format", "JSON_MIN"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].endswith(": 0 task(s) imported, 8 already there")
    assert out.out.splitlines()[1].endswith("cli.json written, 7 reviewed question(s), 0 not reviewed yet")
    monkeypatch.setenv("REVIEW_TOKEN", "wrong-token-0123456789")
    assert cli.main(["push", str(reviewed["tasks"]), *args]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"jobs.label_studio: error: GET {server.url}/api/projects: HTTP 401")
    assert TOKEN not in line and "wrong-token" not in line


def session_cookies(url: str) -> dict[str, str]:
    """The admin's session cookies, logged in through the login form as a browser does."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = opener.open(f"{url}/user/login/").read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    fields = urllib.parse.urlencode({"csrfmiddlewaretoken": csrf, "email": EMAIL, "password": PASSWORD}).encode()
    opener.open(urllib.request.Request(f"{url}/user/login/", data=fields, headers={"Referer": f"{url}/user/login/"}))
    return {cookie.name: cookie.value for cookie in jar}


# The viewport points of the first and the last character of TEXT in the labelling interface's copy of the context
# (its last text node holding TEXT: the Data Manager's column, which shows the context too, comes first): where a
# person starts and ends a drag to select it.
SPAN_ENDS = """((TEXT) => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let node, last = null;
  while ((node = walker.nextNode()))
    if (node.textContent.includes(TEXT)) last = node;
  if (!last) return null;
  const at = (i) => { const r = document.createRange(); r.setStart(last, i); r.setEnd(last, i + 1);
                      return r.getBoundingClientRect(); };
  const i = last.textContent.indexOf(TEXT), a = at(i), b = at(i + TEXT.length - 1);
  return [a.left + 1, (a.top + a.bottom) / 2, b.right - 1, (b.top + b.bottom) / 2];
})"""
HIGHLIGHTS = "Array.from(document.querySelectorAll('.htx-highlight')).map(e => e.textContent)"
SUBMIT = "Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Submit').click()"


async def review_in_browser(page: Page, task_url: str, text: str) -> list[str]:
    """Opens the task, reads the highlighted prediction, selects `text` with the Answer label and submits."""
    await page.command("Page.navigate", url=task_url)
    shown = await page.wait_for(f"(() => {{ const h = {HIGHLIGHTS}; return h.length ? h : null; }})()")
    await page.wait_for(SUBMIT.replace(".click()", " !== undefined"))
    await asyncio.sleep(2)  # the interface binds its hotkeys once loaded
    await page.press("1", "Digit1", 49)  # the Answer label's hotkey: the next selection is an answer
    await asyncio.sleep(0.5)
    x0, y0, x1, y1 = await page.wait_for(f"{SPAN_ENDS}({json.dumps(text)})")
    await page.drag((x0, y0), (x1, y1))
    await page.wait_for(f"{HIGHLIGHTS}.includes({json.dumps(text)})")
    await page.evaluate(
        "Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Submit').click()"
    )
    return shown


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium-headless-shell)")
def test_the_labelling_interface_counts_offsets_in_code_points(server: Server, tmp_path: Path) -> None:
    """In Label Studio's own interface: the prediction's offsets highlight its text, and a span a person selects
    after emoji and other characters outside the BMP comes back with Python's offsets (UTF-16 would count 7 more)."""
    dataset = SquadDataset([SquadExample("ui", None, "What lives in it?", NILE)], "2.0", False)
    path = tmp_path / "label_studio.json"
    path.write_text(json.dumps(label_studio_tasks(dataset, {"ui": answered(NILE, "𝔘nicode", 0.6)}), ensure_ascii=False))
    client = LabelStudio(server.url, TOKEN)
    project = push(client, path, "Offsets in the interface")["project"]
    [task] = client.request("GET", f"/api/tasks?project={project}&fields=task_only&include=id,data")["tasks"]

    async def session() -> tuple[list[str], list[dict]]:
        async with browser_page(session_cookies(server.url), server.url) as page:
            shown = await review_in_browser(
                page, f"{server.url}/projects/{project}/data?task={task['id']}", "live in it"
            )
            # The page saves the submission asynchronously: the browser stays open until the server has it.
            for _ in range(120):
                annotations = client.request("GET", f"/api/tasks/{task['id']}/annotations")
                if annotations:
                    break
                await asyncio.sleep(0.5)
            return shown, annotations

    shown, annotations = asyncio.run(session())
    assert shown == ["𝔘nicode"]
    [annotation] = annotations
    spans = sorted((r["value"]["start"], r["value"]["end"], r["value"]["text"]) for r in annotation["result"])
    assert NILE.index("live in it") == 41 and len(NILE[:41].encode("utf-16-le")) // 2 == 48
    assert spans == [(30, 37, "𝔘nicode"), (41, 51, "live in it")]
    export = tmp_path / "export.json"
    pull(client, "Offsets in the interface", export, "JSON")
    [example] = read_questions(export).examples
    assert example.answers == [GoldAnswer("𝔘nicode", 30), GoldAnswer("live in it", 41)]
