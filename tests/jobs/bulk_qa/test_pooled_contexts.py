"""
SQuAD input answered open-domain (`--pool-contexts`): the distinct contexts pooled into the corpus, every question
retrieved for over them as Haystack's `InMemoryBM25Retriever` ranks them, its own context the gold of the recall@k
and MRR reported (checked against ranks counted from Haystack's own retrieval), the official metrics on the
end-to-end answers, annotated files in each question's own context, resume and refusals. In-process runs (no Ray).
"""

import json
import re
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from haystack import Document as HaystackDocument
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from jobs import evaluate as evaluate_cli
from jobs.bulk_qa.output import CONTEXTS_FILE, CONTEXTS_FOLDER
from jobs.bulk_qa.pooled_contexts import pool_contexts
from qa_core import Document
from qa_core.squad import read_squad
from tests.jobs.conftest import read_output, run_job
from tests.qa_core.reference import squad_v2_official

SAMPLE = Path("data/sample/squad_sample.json")
CONTEXT_TABLE = Path("data/sample/squad_questions.parquet")  # id, query, context
FLAGS = ["--max-seq-length", "96", "--stride", "24", "--top-k", "3", "--engine", "in-process", "--quiet"]
RETRIEVER_TOP_K = 3
CUTOFFS = (1, 3, 5, 10)


def test_pool_contexts_keeps_each_distinct_context_once_with_its_closed_run_id() -> None:
    pooled = pool_contexts(["a", "b", "c", "d", "e"], ["Two.", "One.", "Two.", None, ""])
    assert pooled.documents.to_pydict() == {
        "id": [Document(content="Two.").id, Document(content="One.").id],
        "content": ["Two.", "One."],
    }
    assert pooled.relevant == {"a": [Document(content="Two.").id], "b": [Document(content="One.").id],
                               "c": [Document(content="Two.").id]}  # fmt: skip


@pytest.fixture(scope="module")
def pooled_run(tmp_path_factory: pytest.TempPathFactory, tiny_bert_model: Path) -> list[str]:
    output = tmp_path_factory.mktemp("pooled") / "out"
    args = ["--questions", SAMPLE, "--output", output, "--model", tiny_bert_model, "--pool-contexts", *FLAGS]
    args = [*map(str, args), "--retriever-top-k", str(RETRIEVER_TOP_K)]
    assert run_job(*args) == 0
    return args


@pytest.fixture(scope="module")
def output(pooled_run: list[str]) -> Path:
    return Path(pooled_run[pooled_run.index("--output") + 1])


def load(output: Path, name: str):
    return json.loads((output / name).read_text(encoding="utf-8"))


def haystack_ranks(examples) -> dict[str, int | None]:
    """Each question's own context's rank (from 1) among Haystack's BM25 hits over the distinct contexts."""
    store = InMemoryDocumentStore()
    store.write_documents([HaystackDocument(content=c) for c in dict.fromkeys(e.context for e in examples)])
    retriever = InMemoryBM25Retriever(store, top_k=RETRIEVER_TOP_K)
    ranks = {}
    for example in examples:
        hits = [doc.content for doc in retriever.run(query=example.question)["documents"]]
        ranks[example.id] = hits.index(example.context) + 1 if example.context in hits else None
    return ranks


def test_every_question_is_retrieved_for_over_the_pooled_contexts(output: Path) -> None:
    examples = read_squad(SAMPLE).examples
    distinct = list(dict.fromkeys(example.context for example in examples))
    corpus = pq.read_table(output / CONTEXTS_FOLDER / CONTEXTS_FILE).to_pydict()
    assert corpus == {"id": [Document(content=c).id for c in distinct], "content": distinct}
    assert len(distinct) < len(examples)  # contexts shared by several questions are one document
    store = InMemoryDocumentStore()
    store.write_documents([HaystackDocument(content=context) for context in distinct])
    retriever = InMemoryBM25Retriever(store, top_k=RETRIEVER_TOP_K)
    rows = {row["question_id"]: row for row in read_output(output, "questions")}
    for example in examples:
        hits = retriever.run(query=example.question)["documents"]
        row = rows[example.id]
        assert row["retrieved_document_ids"] == [doc.id for doc in hits], example.id
        assert row["retrieval_scores"] == pytest.approx([doc.score for doc in hits], abs=1e-9), example.id
    answers = read_output(output, "answers")
    assert {row["document_id"] for row in answers if not row["is_no_answer"]} <= set(corpus["id"])
    manifest = load(output, "manifest.json")
    assert manifest["pooled_contexts"]["documents"] == len(distinct)
    assert manifest["pooled_contexts"]["questions_with_context"] == len(examples)
    assert manifest["index"]["documents"] == len(distinct)


def test_recall_and_mrr_against_each_questions_own_context(output: Path) -> None:
    ranks = haystack_ranks(read_squad(SAMPLE).examples)
    n = len(ranks)
    expected: dict[str, float | int] = {"questions": n}
    for k in (*CUTOFFS, None):
        found = Fraction(sum(rank is not None and (k is None or rank <= k) for rank in ranks.values()), n)
        suffix = "" if k is None else f"@{k}"
        expected[f"recall{suffix}"] = expected[f"multi_hit_recall{suffix}"] = float(found)  # one relevant document
    expected["mrr"] = float(sum(Fraction(1, rank) for rank in ranks.values() if rank is not None) / n)
    assert 0 < expected["recall@1"] < 1 and 0 < expected["mrr"] < 1  # the sample tells them apart
    quality = load(output, "evaluation.json")["retrieval"]
    assert quality == pytest.approx(expected, abs=1e-12, rel=0)
    assert load(output, "manifest.json")["retrieval_quality"] == quality
    report = output / "report.html"
    if report.exists():  # matplotlib installed
        text = report.read_text()
        assert f'data-metric="retrieval.mrr"><td>mrr</td><td class="number">{quality["mrr"]:.4f}' in text
        rows = dict(re.findall(r'<tr data-id="([^"]+)">(.*?)</tr>', text))  # the worst questions: all 12
        assert {qid: re.findall(r"<td[^>]*>([^<]*)</td>", row)[-1] for qid, row in rows.items()} == {
            qid: str(rank) if rank is not None else "not retrieved" for qid, rank in ranks.items()
        }


def test_official_metrics_score_the_end_to_end_answers(output: Path) -> None:
    predictions, na_probs = load(output, "predictions.json"), load(output, "na_probs.json")
    rows = read_output(output, "questions")
    assert predictions == {row["question_id"]: row["best_answer"] or "" for row in rows}
    raw = json.loads(SAMPLE.read_text(encoding="utf-8"))["data"]
    theirs, _, _ = squad_v2_official.official_eval(raw, predictions, na_probs)
    ours = load(output, "evaluation.json")
    assert list(ours) == [*theirs, "no_answer_sources", "retrieval"]
    assert {key: ours[key] for key in theirs} == pytest.approx(theirs, abs=1e-9, rel=0)
    assert load(output, "manifest.json")["evaluation"] == {key: ours[key] for key in ours if key != "retrieval"}


def test_annotated_files_keep_each_questions_own_context_and_its_spans(output: Path) -> None:
    own = {example.id: example.context for example in read_squad(SAMPLE).examples}
    spans_in_own = {}
    for row in read_output(output, "answers"):
        if not row["is_no_answer"] and row["document_id"] == Document(content=own[row["question_id"]]).id:
            spans_in_own.setdefault(row["question_id"], []).append(row["answer"])
    annotated = read_squad(output / "annotated.squad.json")  # gold kept: it reads back as the input
    assert [(e.id, e.context, e.answers) for e in annotated.examples] == [
        (e.id, e.context, e.answers) for e in read_squad(SAMPLE).examples
    ]
    document = load(output, "annotated.squad.json")
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                texts = [span["text"] for span in qa["predicted_answers"]]
                assert texts == spans_in_own.get(qa["id"], []), qa["id"]
                for span in qa["predicted_answers"]:
                    start = span["answer_start"]
                    assert paragraph["context"][start : start + len(span["text"])] == span["text"]
    assert any(len(spans) < 3 for spans in spans_in_own.values())  # some spans came from other contexts


def test_a_rerun_resumes_and_a_closed_run_is_refused_in_its_folder(
    pooled_run: list[str], output: Path, capsys: pytest.CaptureFixture
) -> None:
    before = load(output, "evaluation.json")
    assert run_job(*pooled_run) == 0
    manifest = load(output, "manifest.json")
    assert (manifest["shards"]["resumed"], manifest["index"]["source"]) == (1, "resumed")
    assert load(output, "evaluation.json") == before
    identity = load(output, "_job.json")
    assert identity["inputs"]["pooled_contexts"] == manifest["pooled_contexts"]["fingerprint"]
    closed = [arg for arg in pooled_run if arg != "--pool-contexts"]
    assert run_job(*closed) == 2
    assert "other settings (pool_contexts)" in capsys.readouterr().err


def test_a_questions_table_with_a_context_column_is_pooled(tmp_path: Path, tiny_bert_model: Path) -> None:
    output = tmp_path / "out"
    args = ["--questions", CONTEXT_TABLE, "--output", output, "--model", tiny_bert_model, "--pool-contexts", *FLAGS]
    assert run_job(*args) == 0
    table = pq.read_table(CONTEXT_TABLE).to_pydict()
    pooled = pool_contexts(table["id"], table["context"])
    rows = read_output(output, "questions")
    retrieved = {row["question_id"]: row["retrieved_document_ids"] for row in rows}
    assert all(retrieved.values())
    ranks = [retrieved[qid].index(pooled.relevant[qid][0]) + 1 for qid in retrieved]  # all found: top 10 of 5 contexts
    quality = load(output, "evaluation.json")["retrieval"]
    assert load(output, "evaluation.json") == {"retrieval": load(output, "manifest.json")["retrieval_quality"]}
    assert quality["recall@1"] == pytest.approx(sum(rank == 1 for rank in ranks) / len(ranks), abs=1e-12, rel=0)
    assert quality["mrr"] == pytest.approx(sum(1 / rank for rank in ranks) / len(ranks), abs=1e-12, rel=0)
    for qa in (qa for a in load(output, "annotated.squad.json")["data"] for p in a["paragraphs"] for qa in p["qas"]):
        context = table["context"][table["id"].index(qa["id"])]
        for span in qa["predicted_answers"]:
            assert context[span["answer_start"] : span["answer_start"] + len(span["text"])] == span["text"]


@pytest.mark.parametrize(
    ("questions", "extra", "message"),
    [
        ("data/sample/questions.parquet", ["--pool-contexts", "--documents", "data/sample/documents.parquet"],
         "leave out --documents"),
        ("data/sample/questions.parquet", ["--pool-contexts"], "questions table has no 'context' column"),
        (str(SAMPLE), ["--retrieval", "hybrid", "--embedding-model", "any"], "add --pool-contexts"),
        (str(SAMPLE), ["--index", "some/index"], "--index some/index would not be used: add --pool-contexts"),
    ],
)  # fmt: skip
def test_bad_combinations_exit_2_with_a_clear_message(
    questions: str, extra: list[str], message: str, tiny_bert_model: Path, tmp_path: Path, capsys
) -> None:
    status = run_job("--questions", questions, "--output", tmp_path / "out", "--model", tiny_bert_model, *extra)
    assert status == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_context_table_with_document_ids_too_is_refused(tmp_path: Path, tiny_bert_model: Path, capsys) -> None:
    questions = tmp_path / "both.parquet"
    pq.write_table(pa.table({"id": ["q"], "query": ["Who?"], "context": ["Ann."], "document_ids": [["d"]]}), questions)
    status = run_job("--questions", questions, "--output", tmp_path / "out", "--model", tiny_bert_model,
                     "--pool-contexts")  # fmt: skip
    assert status == 2
    assert "has both 'document_ids' and 'context'" in capsys.readouterr().err


def test_evaluate_command_keeps_the_runs_retrieval_quality(output: Path, tmp_path: Path) -> None:
    assert evaluate_cli.main([str(output), "--gold", str(SAMPLE), "--to", str(tmp_path)]) == 0
    written = load(tmp_path, "evaluation.json")
    assert written["retrieval"] == load(output, "evaluation.json")["retrieval"]
    assert {key: written[key] for key in ("exact", "f1")} == {
        key: load(output, "evaluation.json")[key] for key in ("exact", "f1")
    }
