"""
`report.html` (issue 13, point 7): written by the job at the end of a run on the SQuAD sample (gold, with a
refusal threshold), self-contained (PNG data: URIs only), its status counts the manifest's, its worst questions in
the documented order with their gold and best spans highlighted; the same report from `python -m jobs.report`;
the unlabelled variant; the run without matplotlib; and, where a Chromium is installed, rendered in it.
One job run and one resumed run.
"""

import base64
import io
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from jobs import report as report_cli
from jobs.bulk_qa import html_report
from jobs.bulk_qa.output import OutputFolder
from qa_core.evaluation import find_best_thresh
from tests.jobs.conftest import run_job

SAMPLE = Path("data/sample/squad_sample.json")
FLAGS = ["--max-seq-length", "96", "--stride", "24", "--top-k", "3", "--refusal-threshold", "0.04"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUM = next(
    (path for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
     if (path := shutil.which(name))),
    None,
)  # fmt: skip


@pytest.fixture(scope="module")
def run(tiny_bert_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The SQuAD sample's run, in-process (no Ray in this module): the report is written from its output."""
    output = tmp_path_factory.mktemp("report-run") / "out"
    args = [str(arg) for arg in ["--questions", SAMPLE, "--output", output, "--model", tiny_bert_model, *FLAGS]]
    assert run_job(*args) == 0
    return args


@pytest.fixture(scope="module")
def output(run: list[str]) -> Path:
    return Path(run[run.index("--output") + 1])


@pytest.fixture(scope="module")
def page(output: Path) -> str:
    return (output / "report.html").read_text(encoding="utf-8")


def load(output: Path, name: str):
    return json.loads((output / name).read_text(encoding="utf-8"))


class Segments(HTMLParser):
    """The text of each worst question's context row, as (mark classes, text) segments; and each row's id."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.contexts: list[list[tuple[frozenset[str], str]]] = []
        self._in_context = False
        self._classes: frozenset[str] = frozenset()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "tr" and "data-id" in attributes:
            self.ids.append(attributes["data-id"])
        elif tag == "tr" and attributes.get("class") == "context":
            self._in_context = True
            self.contexts.append([])
        elif tag == "mark" and self._in_context:
            self._classes = frozenset(attributes["class"].split())

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._in_context = False
        elif tag == "mark":
            self._classes = frozenset()

    def handle_data(self, data: str) -> None:
        if self._in_context:
            self.contexts[-1].append((self._classes, data))


def runs(segments: list[tuple[frozenset[str], str]], name: str) -> list[str]:
    """The texts of the maximal runs of consecutive segments marked `name`."""
    found, current = [], None
    for classes, text in segments:
        if name in classes:
            current = (current or "") + text
        elif current is not None:
            found.append(current)
            current = None
    return found + ([current] if current is not None else [])


def annotated_questions(output: Path) -> dict[str, dict]:
    document = load(output, "annotated.squad.json")
    return {
        qa["id"]: {**qa, "context": p["context"]}
        for article in document["data"]
        for p in article["paragraphs"]
        for qa in p["qas"]
    }


def images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', page)]


def dotted(metrics: dict) -> list[tuple[str, float]]:
    """Every number of a nested metrics dict, under its dotted key."""
    return [
        (f"{key}.{inner}" if inner else key, number)
        for key, value in metrics.items()
        for inner, number in (dotted(value) if isinstance(value, dict) else [("", value)])
        if isinstance(number, int | float)
    ]


def test_the_job_writes_the_report_and_lists_it(output: Path, page: str) -> None:
    assert load(output, "manifest.json")["result_files"][-1] == "report.html"
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_status_counts_are_the_manifest_s(output: Path, page: str) -> None:
    shown = dict(re.findall(r'<tr data-status="(\w+)"><td>\w+</td><td class="count">(\d+)</td></tr>', page))
    statuses = load(output, "manifest.json")["outputs"]["statuses"]
    assert {name: int(count) for name, count in shown.items()} == statuses
    assert statuses["refused"] > 0 and statuses["answered"] > 0  # the threshold splits the sample


def test_figures_are_embedded_pngs(page: str) -> None:
    pngs = images(page)
    assert len(pngs) == 4 == page.count("<img ")  # status and gold histograms, threshold curves, reliability
    for png in pngs:
        assert png.startswith(PNG_MAGIC)
        with Image.open(io.BytesIO(png)) as image:
            assert image.format == "PNG" and image.width >= 400 and image.height >= 300
        assert matplotlib.image.imread(io.BytesIO(png), format="png").ndim == 3


def test_nothing_is_referenced_outside_the_file(page: str) -> None:
    references = re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page)
    assert len(references) == 4 and all(ref.startswith("data:image/png;base64,") for ref in references)
    assert "<script" not in page and "url(" not in page and "@import" not in page
    assert "http://" not in page and "https://" not in page and "<link" not in page


def test_evaluation_and_the_marked_thresholds(output: Path, page: str) -> None:
    flat = dotted(load(output, "evaluation.json"))
    assert {"exact", "f1", "best_f1_thresh"} <= {key for key, _ in flat}
    for key, value in flat:
        assert f'<tr data-metric="{key}"><td>{key}</td><td class="number">{html_report._number(value)}</td>' in page
    assert "This run refused at no-answer probability &gt;= 0.04." in page


def test_worst_questions_in_order_with_gold_and_best_span_marked(output: Path, page: str) -> None:
    evaluation = pq.read_table(output / "evaluation").to_pylist()
    qas = annotated_questions(output)
    best = {qid: qa["predicted_answers"][0] for qid, qa in qas.items()}
    # Lowest F1 first; ties: the most confident best span first, then the table's order.
    order = sorted(
        range(len(evaluation)), key=lambda i: (evaluation[i]["f1"], -best[evaluation[i]["question_id"]]["score"], i)
    )
    expected = [evaluation[i]["question_id"] for i in order]
    parsed = Segments()
    parsed.feed(page)
    assert parsed.ids == expected[: html_report.WORST] and len(parsed.ids) == 12
    for qid, segments in zip(parsed.ids, parsed.contexts, strict=True):
        golds = [answer["text"] for answer in qas[qid]["answers"]]
        gold_runs = runs(segments, "gold")
        assert all(text in golds for text in gold_runs) and all(any(g in r for r in gold_runs) for g in golds)
        assert runs(segments, "pred") == [best[qid]["text"]]
        assert "".join(text for _, text in segments) in qas[qid]["context"] or segments[0][1].startswith("…")
    assert "Wiskunde &amp; Informatica" in page  # the context is escaped (sq01's "&")


def test_the_report_command_writes_the_same_report(output: Path, page: str, tmp_path: Path, capsys) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    (copy / "report.html").unlink()
    assert report_cli.main([str(copy)]) == 0
    assert capsys.readouterr().out.strip() == str(copy / "report.html")
    assert (copy / "report.html").read_text(encoding="utf-8") == page.replace(str(output), str(copy))
    assert report_cli.main([str(tmp_path / "nothing")]) == 2


def test_without_gold_the_worst_are_the_least_confident(output: Path) -> None:
    manifest = {key: value for key, value in load(output, "manifest.json").items() if key != "evaluation"}
    page = html_report.render(OutputFolder(str(output)), manifest, html_report.plotting())
    assert len(images(page)) == 1 and "<h2>Evaluation</h2>" not in page
    best = {qid: qa["predicted_answers"][0] for qid, qa in annotated_questions(output).items()}
    parsed = Segments()
    parsed.feed(page)
    assert parsed.ids == sorted(best, key=lambda qid: (best[qid]["score"], qid))
    for qid, segments in zip(parsed.ids, parsed.contexts, strict=True):
        assert runs(segments, "gold") == [] and runs(segments, "pred") == [best[qid]["text"]]


def test_without_matplotlib_the_job_finishes_and_says_how(
    run: list[str], output: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    (copy / "report.html").unlink()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    args = list(run)
    args[args.index("--output") + 1] = str(copy)
    assert run_job(*args) == 0  # a resumed run: every shard kept, the results rewritten
    error = capsys.readouterr().err
    assert [line for line in error.splitlines() if "report.html" in line] == [html_report.MISSING_MATPLOTLIB]
    assert "pip install '.[report]'" in html_report.MISSING_MATPLOTLIB
    manifest = load(copy, "manifest.json")
    assert manifest["shards"]["resumed"] == 1 and "report.html" not in manifest["result_files"]
    assert not (copy / "report.html").exists()
    assert report_cli.main([str(copy)]) == 1


def test_threshold_curve_peaks_at_the_official_best() -> None:
    rng = np.random.default_rng(0)
    n = 300
    no_answer = rng.permutation(np.linspace(0.001, 0.999, n))  # distinct: no ties
    has_answer = rng.random(n) < 0.6
    raw = np.where(has_answer, rng.random(n).round(2), 0.0)
    given = np.where(has_answer, raw, 0.0)  # every question has a (non-empty) best span
    thresholds, curve = html_report.threshold_curve(no_answer, given, (~has_answer).astype(float))
    ids = [f"q{i}" for i in range(n)]
    best, best_thresh = find_best_thresh(
        dict.fromkeys(ids, "span"), dict(zip(ids, raw, strict=True)), dict(zip(ids, no_answer, strict=True)),
        dict(zip(ids, has_answer, strict=True)),
    )  # fmt: skip
    assert curve.max() == pytest.approx(best, abs=1e-9)
    assert curve[np.searchsorted(thresholds, best_thresh)] == pytest.approx(best, abs=1e-9)
    assert curve[0] == pytest.approx(100.0 * (~has_answer).mean()) and thresholds[[0, -1]].tolist() == [0.0, 1.0]


def test_highlight_escapes_and_cuts_the_context() -> None:
    context = "x" * 400 + "a <b> & c d" + "y" * 400
    start = 400
    shown = html_report.highlight(context, [(start, "a <b>")], (start + 3, "b> & c"))
    assert shown.startswith("…") and shown.endswith("…")
    assert (
        '<mark class="gold">a &lt;</mark><mark class="gold pred">b&gt;</mark><mark class="pred"> &amp; c</mark>'
        in shown
    )
    assert len(shown) < len(context)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (apt-get install chromium-headless-shell)")
def test_chromium_renders_the_report(output: Path, tmp_path: Path) -> None:
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1150,6000",
         f"--screenshot={screenshot}", (output / "report.html").resolve().as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    pixels = np.asarray(Image.open(screenshot).convert("RGB")).reshape(-1, 3)
    counts = {tuple(colour): n for colour, n in zip(*np.unique(pixels, axis=0, return_counts=True), strict=True)}
    assert counts.get((165, 214, 167), 0) > 200  # mark.gold's background: the worst table's gold spans
    assert counts.get((255, 224, 130), 0) > 200  # mark.pred's: the best spans
    assert counts.get((127, 127, 127), 0) > 1000  # the reliability diagram's count bars: the PNGs were drawn
