"""
The job on SQuAD input (issue 13): gold kept, misaligned gold refused or reported, the official prediction files,
evaluation equal to the official SQuAD v2.0 script on the job's own predictions, the annotated dataset and Label
Studio tasks, `python -m jobs.evaluate`, and results rewritten complete by a resumed run. Two job runs.
"""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

from jobs import evaluate as evaluate_cli
from jobs.bulk_qa.config import load_config
from jobs.bulk_qa.results import model_version
from jobs.bulk_qa.workers.tables import QUESTIONS_SCHEMA
from qa_core import Document, ExtractiveReader
from qa_core.evaluation import evaluate, fit_calibration_factor, get_raw_scores
from qa_core.squad import read_squad
from tests.jobs.conftest import assert_same_outputs, by_question, read_output, run_job
from tests.qa_core.reference import squad_v2_official

SAMPLE = Path("data/sample/squad_sample.json")
FLAGS = ["--max-seq-length", "96", "--stride", "24", "--top-k", "3"]
TOLERANCE = 1e-9
MISALIGNED = {"id": "bad1", "question": "What is misaligned?", "answers": [{"text": "Nile", "answer_start": 3}],
              "is_impossible": False}  # fmt: skip


@pytest.fixture(scope="module")
def gold_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample with one more question whose only gold answer does not index its context."""
    data = json.loads(SAMPLE.read_text(encoding="utf-8"))
    data["data"].append({"title": "extra", "paragraphs": [{"context": "The Nile flows north.", "qas": [MISALIGNED]}]})
    path = tmp_path_factory.mktemp("gold") / "gold.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(local_ray, gold_file: Path, tiny_bert_model: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    output = tmp_path_factory.mktemp("squad-run") / "out"
    args = ["--questions", gold_file, "--output", output, "--model", tiny_bert_model, *FLAGS, "--shard-size", "5"]
    assert run_job(*args, "--allow-misaligned-gold") == 0
    return [*map(str, args), "--allow-misaligned-gold"]


@pytest.fixture(scope="module")
def output(run: list[str]) -> Path:
    return Path(run[run.index("--output") + 1])


def load(output: Path, name: str):
    return json.loads((output / name).read_text(encoding="utf-8"))


def test_misaligned_gold_exits_2_naming_the_id(gold_file: Path, tiny_bert_model: Path, tmp_path: Path, capsys) -> None:
    status = run_job("--questions", gold_file, "--output", tmp_path / "out", "--model", tiny_bert_model)
    assert status == 2
    error = capsys.readouterr().err
    assert "question 'bad1': answer 'Nile' at answer_start 3 does not match its context" in error
    assert "--allow-misaligned-gold" in error
    assert not (tmp_path / "out").exists()


def test_allowed_misaligned_gold_is_reported_and_skipped(output: Path) -> None:
    manifest = load(output, "manifest.json")
    assert manifest["gold"] == {"version": "2.0", "has_gold": True, "questions": 12,
                                "misaligned": [{"id": "bad1", "text": "Nile", "answer_start": 3}]}  # fmt: skip
    assert [row["question_id"] for row in read_output(output, "questions")] == [f"sq{i:02d}" for i in range(1, 13)]
    assert manifest["inputs"]["questions"] == 12 and manifest["reconciled"] is True


def test_prediction_files_are_the_questions_table(output: Path) -> None:
    questions = read_output(output, "questions")
    assert load(output, "predictions.json") == {row["question_id"]: row["best_answer"] or "" for row in questions}
    assert load(output, "na_probs.json") == {row["question_id"]: row["no_answer_score"] for row in questions}
    assert {row["status"] for row in questions} <= {"answered", "refused"}
    assert pq.read_schema(next((output / "questions").glob("*.parquet"))).names == QUESTIONS_SCHEMA.names


def test_evaluation_equals_the_official_script_on_the_job_predictions(output: Path) -> None:
    predictions, na_probs = load(output, "predictions.json"), load(output, "na_probs.json")
    raw = json.loads(SAMPLE.read_text(encoding="utf-8"))["data"]  # the official script on the file itself
    theirs, their_exact, their_f1 = squad_v2_official.official_eval(raw, predictions, na_probs)
    ours = load(output, "evaluation.json")
    assert load(output, "manifest.json")["evaluation"] == ours
    assert list(ours) == [*theirs, "no_answer_sources"]
    assert {key: ours[key] for key in theirs} == pytest.approx(theirs, abs=TOLERANCE, rel=0)
    rows = pq.read_table(output / "evaluation").to_pylist()
    assert [row["question_id"] for row in rows] == list(their_exact)
    for row in rows:
        assert row["exact"] == their_exact[row["question_id"]] and row["f1"] == pytest.approx(
            their_f1[row["question_id"]], abs=TOLERANCE, rel=0
        )
        assert (row["prediction"], row["no_answer_probability"]) == (
            predictions[row["question_id"]], na_probs[row["question_id"]]
        )  # fmt: skip


def test_evaluation_compares_both_no_answer_sources_as_the_official_script_does(output: Path) -> None:
    """Each source's best thresholds with every best span given, and HasAns / NoAns F1 at its best_f1_thresh."""
    raw = json.loads(SAMPLE.read_text(encoding="utf-8"))["data"]
    answers = by_question(read_output(output, "answers"))
    best = {qid: next(row["answer"] for row in rows if not row["is_no_answer"]) for qid, rows in answers.items()}
    questions = read_output(output, "questions")
    compared = load(output, "evaluation.json")["no_answer_sources"]
    assert list(compared) == ["haystack", "model"]
    for source, column in (("haystack", "no_answer_score"), ("model", "model_no_answer_score")):
        na_probs = {row["question_id"]: row[column] for row in questions}
        sweep, _, _ = squad_v2_official.official_eval(raw, best, na_probs)
        at_best, _, _ = squad_v2_official.official_eval(raw, best, na_probs, sweep["best_f1_thresh"])
        expected = {key: sweep[key] for key in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh")}
        expected.update(HasAns_f1=at_best["HasAns_f1"], NoAns_f1=at_best["NoAns_f1"])
        assert list(compared[source]) == list(expected)
        assert compared[source] == pytest.approx(expected, abs=TOLERANCE, rel=0)


def direct_model_no_answer(model_dir: Path, question: str, context: str) -> float:
    """sigmoid(lowest CLS logit sum - best context span's) over the windows, straight from transformers."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForQuestionAnswering.from_pretrained(model_dir).eval()
    encoded = tokenizer(question, context, truncation="only_second", max_length=96, stride=24,
                        return_overflowing_tokens=True)  # fmt: skip
    nulls, bests = [], []
    for row, input_ids in enumerate(encoded["input_ids"]):
        with torch.no_grad():
            output = model(input_ids=torch.tensor([input_ids]), attention_mask=torch.ones(1, len(input_ids)))
        start, end = output.start_logits[0].tolist(), output.end_logits[0].tolist()
        tokens = [i for i, sequence_id in enumerate(encoded.sequence_ids(row)) if sequence_id == 1]
        nulls.append(start[0] + end[0])
        bests.append(max(start[s] + end[e] for s in tokens for e in tokens if s <= e))
    return 1 / (1 + math.exp(max(bests) - min(nulls)))


def test_model_no_answer_source_refuses_by_the_null_span(output: Path, tiny_bert_model: Path, tmp_path: Path) -> None:
    """Run in-process, the SQuAD file's questions read from memory: the Ray run's scores, to the bit."""
    model_run = tmp_path / "model-source"
    args = ["--questions", SAMPLE, "--output", model_run, "--model", tiny_bert_model, *FLAGS, "--engine", "in-process"]
    assert run_job(*args, "--no-answer-source", "model") == 0
    questions = {row["question_id"]: row for row in read_output(model_run, "questions")}
    haystack_run = {row["question_id"]: row for row in read_output(output, "questions")}
    for example in read_squad(SAMPLE).examples:
        row = questions[example.id]
        expected = direct_model_no_answer(tiny_bert_model, example.question, example.context)
        assert row["model_no_answer_score"] == pytest.approx(expected, abs=1e-6)
        assert row["model_no_answer_score"] == haystack_run[example.id]["model_no_answer_score"]
        assert row["no_answer_score"] == haystack_run[example.id]["no_answer_score"]  # Haystack's, either way
        assert row["status"] == ("refused" if row["model_no_answer_score"] > 0.5 else "answered")
    statuses = [row["status"] for row in questions.values()]
    assert (statuses.count("answered"), statuses.count("refused")) == (12, 0)  # the random head: null below span
    assert load(model_run, "na_probs.json") == {qid: row["model_no_answer_score"] for qid, row in questions.items()}
    assert load(model_run, "manifest.json")["config"]["no_answer_source"] == "model"


def test_annotated_dataset_round_trips_with_the_job_answers(output: Path, tiny_bert_model: Path) -> None:
    back = read_squad(output / "annotated.squad.json")
    assert back == read_squad(SAMPLE)  # same questions, contexts and gold
    answers = by_question(read_output(output, "answers"))
    document = load(output, "annotated.squad.json")
    qas = [(p["context"], qa) for article in document["data"] for p in article["paragraphs"] for qa in p["qas"]]
    assert len(qas) == 12
    for context, qa in qas:
        spans = [row for row in answers[qa["id"]] if not row["is_no_answer"]]
        assert qa["predicted_answers"] == [
            {"text": row["answer"], "answer_start": row["document_start"], "score": row["score"]} for row in spans
        ]
        assert spans
        for span in qa["predicted_answers"]:
            assert context[span["answer_start"] : span["answer_start"] + len(span["text"])] == span["text"]
    tasks = load(output, "label_studio.json")
    questions = by_question(read_output(output, "questions"))
    scores = [task["predictions"][0]["score"] for task in tasks]
    assert scores == sorted(scores) and len(tasks) == 12  # least sure first
    fingerprint = load(output, "manifest.json")["model"]
    contexts = {qa["id"]: context for context, qa in qas}
    for task in tasks:
        [prediction] = task["predictions"]
        row = questions[task["data"]["question_id"]][0]
        assert prediction["model_version"] == model_version(str(tiny_bert_model), fingerprint)
        assert (task["data"]["status"], task["data"]["no_answer_probability"]) == (
            row["status"],
            row["no_answer_score"],
        )
        [region] = prediction["result"]  # the answer given, alone: every question is answered here
        given = next(a for a in answers[row["question_id"]] if a["answer"] == row["best_answer"])
        where = (given["document_id"], given["file_path"], given["answer_page_number"])
        assert (task["data"]["document_id"], task["data"]["file_path"], task["data"]["page"]) == where
        assert (region["value"]["text"], prediction["score"]) == (row["best_answer"], row["best_score"])
        context = contexts[task["data"]["question_id"]]
        assert context[region["value"]["start"] : region["value"]["end"]] == region["value"]["text"]
    assert (output / "label_studio.xml").read_text().startswith("<View>")


def reviewed(tasks: list[dict], reviews: dict[str, list[dict]]) -> list[dict]:
    """The tasks as Label Studio exports them (JSON) after review: each prediction accepted as it is, unless
    `reviews` gives a question's annotation results."""
    return [
        {"id": number, **task, "annotations": [{"id": number, "was_cancelled": False,
         "result": reviews.get(task["data"]["question_id"], task["predictions"][0]["result"])}]}
        for number, task in enumerate(tasks, start=1)
    ]  # fmt: skip


def predictions_of(tasks: list[dict]) -> dict[str, dict]:
    """Each task's predicted answer region's value, by question id."""
    return {task["data"]["question_id"]: task["predictions"][0]["result"][0]["value"] for task in tasks}


def test_evaluate_reads_a_label_studio_export_as_gold(output: Path, tmp_path: Path) -> None:
    tasks = load(output, "label_studio.json")
    export = tmp_path / "export.json"
    export.write_text(json.dumps(reviewed(tasks, {}), ensure_ascii=False), encoding="utf-8")
    assert evaluate_cli.main([str(output), "--gold", str(export), "--to", str(tmp_path / "accepted")]) == 0
    accepted = load(tmp_path / "accepted", "evaluation.json")
    assert (accepted["exact"], accepted["f1"], accepted["total"]) == (100.0, 100.0, 12)
    # A corrected answer and a "No answer" review score as the official script scores the same SQuAD gold.
    first, second = tasks[0]["data"], tasks[1]["data"]
    value = {"start": 0, "end": 3, "text": first["context"][:3], "labels": ["Answer"]}
    corrected = [{"from_name": "answer", "to_name": "context", "type": "labels", "value": value}]
    no_answer = [
        {"from_name": "no_answer", "to_name": "context", "type": "choices", "value": {"choices": ["No answer"]}}
    ]
    export.write_text(json.dumps(reviewed(tasks, {first["question_id"]: corrected, second["question_id"]: no_answer})))
    assert evaluate_cli.main([str(output), "--gold", str(export), "--to", str(tmp_path / "reviewed")]) == 0
    assert predictions_of(tasks)[first["question_id"]]["text"] != value["text"]
    given = predictions_of(tasks)
    squad_gold = json.loads(SAMPLE.read_text(encoding="utf-8"))
    for article in squad_gold["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = given[qa["id"]]
                qa["answers"] = [{"text": answer["text"], "answer_start": answer["start"]}]
                if qa["id"] == first["question_id"]:
                    qa["answers"] = [{"text": value["text"], "answer_start": 0}]
                qa["is_impossible"] = qa["id"] == second["question_id"]
                qa["answers"] = [] if qa["is_impossible"] else qa["answers"]
    predictions, na_probs = load(output, "predictions.json"), load(output, "na_probs.json")
    official, _, _ = squad_v2_official.official_eval(squad_gold["data"], predictions, na_probs)
    scored = load(tmp_path / "reviewed", "evaluation.json")
    assert (scored["exact"], scored["f1"]) == pytest.approx((official["exact"], official["f1"]), abs=TOLERANCE)
    assert scored["exact"] == pytest.approx(100 * 10 / 12)  # the corrected and the "No answer" question missed


def test_evaluate_command_tunes_refusal_and_calibration(output: Path, gold_file: Path, tiny_bert_model: Path) -> None:
    target = output.parent / "tuned"
    status = evaluate_cli.main([str(output), "--gold", str(gold_file), "--allow-misaligned-gold", "--to", str(target)])
    assert status == 0
    assert load(target, "evaluation.json") == load(output, "evaluation.json")
    # The threshold refuses, in the next run, exactly the questions that reach the best F1 on the gold.
    config = load_config(["--config", str(target / "refusal.yaml"), "--questions", "q", "--output", "o"])
    assert config.refusal.refusal_threshold is not None
    dataset = read_squad(SAMPLE)
    answers = by_question(read_output(output, "answers"))
    na_probs = load(output, "na_probs.json")
    best = {qid: next(row["answer"] for row in rows if not row["is_no_answer"]) for qid, rows in answers.items()}
    refused = {qid: config.refusal.refused(0.0, na_probs[qid]) for qid in best}
    next_run = {qid: "" if refused[qid] else best[qid] for qid in best}
    sweep = evaluate(dataset, best, na_probs)["metrics"]
    assert evaluate(dataset, next_run, na_probs)["metrics"]["f1"] == pytest.approx(sweep["best_f1"], abs=TOLERANCE)
    # Calibration: the logit sums recovered from the scores are the reader's own (another factor gives them too;
    # 0.01 keeps float32 sigmoids far from 1, where they would lose the logit's digits).
    calibration = load(target, "calibration.json")
    reader = ExtractiveReader(model=str(tiny_bert_model), top_k=1, max_seq_length=96, stride=24,
                              calibration_factor=0.01, no_answer=False)  # fmt: skip
    reader.warm_up()
    examples = dataset.examples
    reader_scores = [reader.run(e.question, [Document(content=e.context)])["answers"][0].score for e in examples]
    logits = [math.log(p / (1 - p)) / 0.01 for p in reader_scores]
    scores = [next(row["score"] for row in answers[e.id] if not row["is_no_answer"]) for e in examples]
    recovered = [math.log(p / (1 - p)) / 0.1 for p in scores]
    assert recovered == pytest.approx(logits, abs=1e-3)
    gold = {e.id: [a.text for a in e.answers] for e in examples}
    exact, _ = get_raw_scores(gold, {e.id: best[e.id] for e in examples})
    fit = fit_calibration_factor(np.array(recovered), [exact[e.id] == 1.0 for e in examples], 0.1)
    assert calibration["calibration_factor"] == pytest.approx(fit.factor, rel=1e-9)
    assert (calibration["ece_before"], calibration["ece_after"]) == pytest.approx((fit.ece_before, fit.ece_after))
    assert calibration["questions"] == 12


def test_resumed_run_writes_the_results_complete(run: list[str], output: Path) -> None:
    before = {name: (output / name).read_bytes() for name in ("predictions.json", "na_probs.json", "evaluation.json")}
    for name in (*before, "manifest.json", "annotated.squad.json"):
        (output / name).unlink()
    shutil.rmtree(output / "evaluation")
    assert run_job(*run) == 0
    shards = load(output, "manifest.json")["shards"]
    assert shards["resumed"] == shards["total"] == shards["committed"] > 1
    assert {name: (output / name).read_bytes() for name in before} == before
    assert read_squad(output / "annotated.squad.json") == read_squad(SAMPLE)


def test_unlabelled_jsonl_input_gets_silver_labels(local_ray, tiny_bert_model: Path, tmp_path: Path) -> None:
    rows = [{"id": e.id, "title": e.title, "question": e.question, "context": e.context}
            for e in read_squad(SAMPLE).examples[:6]]  # fmt: skip
    questions = tmp_path / "unlabelled.jsonl"
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output = tmp_path / "out"
    assert run_job("--questions", questions, "--output", output, "--model", tiny_bert_model, *FLAGS) == 0
    assert not (output / "evaluation.json").exists() and "evaluation" not in load(output, "manifest.json")
    statuses = {row["question_id"]: row for row in read_output(output, "questions")}
    back = read_squad(output / "annotated.squad.json")
    assert (back.version, back.has_gold) == ("2.0", True)
    assert [(e.id, e.question, e.context) for e in back.examples] == [
        (r["id"], r["question"], r["context"]) for r in rows
    ]
    for example in back.examples:
        row = statuses[example.id]
        if row["status"] == "answered":
            assert [a.text for a in example.answers] == [row["best_answer"]] and not example.is_impossible
        else:
            assert example.answers == [] and example.is_impossible


def test_pooled_contexts_on_ray_answer_as_in_process_and_label_only_answers_from_their_context(
    local_ray, tiny_bert_model: Path, tmp_path: Path
) -> None:
    rows = [{"id": e.id, "title": e.title, "question": e.question, "context": e.context}
            for e in read_squad(SAMPLE).examples]  # fmt: skip
    questions = tmp_path / "unlabelled.jsonl"
    questions.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    args = ["--questions", questions, "--model", tiny_bert_model, "--pool-contexts", *FLAGS]
    assert run_job(*args, "--output", tmp_path / "ray", "--engine", "ray") == 0
    assert run_job(*args, "--output", tmp_path / "local", "--engine", "in-process") == 0
    assert_same_outputs(tmp_path / "ray", tmp_path / "local", ("questions", "answers"))
    output = tmp_path / "ray"
    assert load(output, "manifest.json")["index"]["documents"] == len({row["context"] for row in rows})
    assert load(output, "evaluation.json")["retrieval"]["questions"] == len(rows)  # gold for retrieval only
    best = {}
    for answer in sorted(read_output(output, "answers"), key=lambda answer: answer["rank"]):
        if not answer["is_no_answer"]:
            best.setdefault(answer["question_id"], answer)
    statuses = {row["question_id"]: row for row in read_output(output, "questions")}
    labelled = {"own": 0, "elsewhere": 0}
    for example in read_squad(output / "annotated.squad.json").examples:  # silver labels
        row = statuses[example.id]
        own = row["status"] == "answered" and best[example.id]["document_id"] == Document(content=example.context).id
        if own:
            assert [a.text for a in example.answers] == [row["best_answer"]], example.id
        elif row["status"] == "answered" and row["best_answer"] not in example.context:
            assert example.is_impossible, example.id
        labelled["own" if own else "elsewhere"] += row["status"] == "answered"
    assert labelled["own"] and labelled["elsewhere"]


def test_bulk_qa_reads_an_export_s_reviewed_tasks_as_questions_with_gold(
    output: Path, tiny_bert_model: Path, tmp_path: Path, capsys
) -> None:
    tasks = load(output, "label_studio.json")
    export = reviewed(tasks, {})
    for task in export[3:]:
        task["annotations"][0]["was_cancelled"] = True  # skipped: not reviewed
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    rerun = tmp_path / "out"
    args = ["--questions", path, "--output", rerun, "--model", tiny_bert_model, *FLAGS, "--engine", "in-process"]
    assert run_job(*args, "--review", "2") == 0
    assert "9 task(s) of the Label Studio export have no review and are left out" in capsys.readouterr().err
    manifest = load(rerun, "manifest.json")
    assert manifest["gold"] == {"version": "2.0", "has_gold": True, "questions": 3, "misaligned": []}
    assert load(rerun, "evaluation.json")["exact"] == 100.0  # the same model gives the answers it was accepted for
    assert [task["data"]["question_id"] for task in load(rerun, "label_studio.json")] == [
        task["data"]["question_id"]
        for task in tasks[:2]  # --review 2: the two least sure, as in the first run
    ]
