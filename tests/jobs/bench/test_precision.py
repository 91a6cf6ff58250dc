"""`python -m jobs.bench.precision`: what it reads is the reader's own answers and the model's null score computed
straight from transformers, and its scores are the official script's on those predictions (no timing)."""

import json
from pathlib import Path

import pytest

from jobs.bench import precision as bench
from qa_core import Document, ExtractiveReader
from qa_core.squad import read_squad
from tests.jobs.bulk_qa.test_annotation import direct_model_no_answer
from tests.qa_core.reference import squad_v2_official

SAMPLE = Path("data/squad/transformers_sample.json")
READER_ARGS = {"max_seq_length": 96, "stride": 24, "max_answer_length": None}  # direct_model_no_answer's windows


@pytest.fixture(scope="module")
def measured(tiny_bert_model: Path) -> tuple[list[dict], dict[str, bench.Read]]:
    return bench.measure(str(tiny_bert_model), read_squad(SAMPLE), ["fp32", "int8"], READER_ARGS)


def test_reads_the_reader_answers_and_the_model_null_score(measured, tiny_bert_model: Path) -> None:
    _, reads = measured
    reader = ExtractiveReader(model=str(tiny_bert_model), device="cpu", **READER_ARGS)
    reader.warm_up()
    for example in read_squad(SAMPLE).examples:
        answers = reader.run(example.question, [Document(content=example.context)])["answers"]
        best = next(answer for answer in answers if answer.data is not None)
        assert reads["fp32"].best[example.id] == (best.data, best.document_offset.start, best.score)
        assert reads["fp32"].haystack[example.id] == next(a.score for a in answers if a.data is None)
        expected = direct_model_no_answer(tiny_bert_model, example.question, example.context)
        assert reads["fp32"].model[example.id] == pytest.approx(expected, abs=1e-6)


def test_rows_are_the_official_scores_and_the_agreement_with_fp32(measured) -> None:
    rows, reads = measured
    raw = json.loads(SAMPLE.read_text(encoding="utf-8"))
    # The official script's layout: one article per context, questions as qas.
    data = [{"paragraphs": [{"context": row["context"], "qas": [{"id": row["id"], "answers": [
        {"text": t, "answer_start": s}
        for t, s in zip(row["answers"]["text"], row["answers"]["answer_start"], strict=True)
    ]}]}]} for row in raw["data"]]  # fmt: skip
    for row, name in zip(rows, ("fp32", "int8"), strict=True):
        read = reads[name]
        refused = {qid: read.haystack[qid] > span[2] for qid, span in read.best.items()}
        given = {qid: "" if refused[qid] else span[0] for qid, span in read.best.items()}
        official, _, _ = squad_v2_official.official_eval(data, given, read.haystack)
        assert (row["haystack"]["exact"], row["haystack"]["f1"]) == pytest.approx((official["exact"], official["f1"]))
        given = {qid: "" if read.model[qid] > 0.5 else span[0] for qid, span in read.best.items()}
        official, _, _ = squad_v2_official.official_eval(data, given, read.model)
        assert (row["model"]["exact"], row["model"]["f1"], row["model"]["NoAns_f1"]) == pytest.approx(
            (official["exact"], official["f1"], official["NoAns_f1"])
        )
    same = sum(reads["int8"].best[qid][:2] == span[:2] for qid, span in reads["fp32"].best.items())
    assert [row["best_unchanged"] for row in rows] == [1.0, same / 14]
