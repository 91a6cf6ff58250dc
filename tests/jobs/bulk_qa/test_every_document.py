"""
`--every-document` (issue 55): each question asked of every document, answered pair by pair as a question naming
that one document would be (the same questions and answers rows), the by_document table (its documented columns,
one row per document, those with no answer included) and its CSV copy, a folder corpus naming file and page,
Label Studio review of the pairs, resume after a killed driver, bad input refused before any work, metadata filters
restricting the documents each question is asked of, and on Ray the in-process tables. Small data and the tiny
model; one Ray, for the last test.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from haystack import Document as HaystackDocument
from haystack.utils.filters import document_matches_filter

from jobs.bulk_qa.every_document import by_document_schema, pair_id, question_column
from tests.jobs.conftest import (
    TEXTS,
    assert_rows_match,
    assert_same_outputs,
    kill_at_first_commit,
    read_output,
    run_job,
    write_table,
)
from tests.qa_core.ingest.files import pdf_bytes

REPO = Path(__file__).resolve().parents[3]
QUESTIONS = {"supplier": "Who wrote the text?", "date": "When did it happen?", "total-amount": "How much was it?"}
DOCUMENTS = {f"doc-{index}": TEXTS[index][:300] for index in range(6)} | {"blank": None}
PAGES = [3, None, 1, None, 7, 2, None]
FLAGS = ["--max-seq-length", "64", "--stride", "16", "--engine", "in-process", "--quiet"]
SHARD_SIZE = ["--shard-size", "6"]  # two documents of three questions per shard: 4 shards
TABLES = ("questions", "answers")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """The documents (one without content, some paged), the questions, and the pairs as questions naming them."""
    root = tmp_path_factory.mktemp("every-document")
    pairs = [
        (pair_id(question, document), QUESTIONS[question], document) for document in DOCUMENTS for question in QUESTIONS
    ]
    return {
        "root": str(root),
        "documents": write_table(
            root / "documents.parquet",
            {"id": list(DOCUMENTS), "content": list(DOCUMENTS.values()), "page_number": PAGES},
            pa.schema([("id", pa.string()), ("content", pa.string()), ("page_number", pa.int64())]),
        ),
        "questions": write_table(
            root / "questions.parquet", {"id": list(QUESTIONS), "query": list(QUESTIONS.values())}
        ),
        "named": write_table(
            root / "named.parquet",
            {
                "id": [key for key, _, _ in pairs],
                "query": [query for _, query, _ in pairs],
                "document_ids": [[document] for _, _, document in pairs],
            },
        ),
    }


def every_args(inputs: dict[str, str], model: Path, output: Path) -> list:
    return ["--questions", inputs["questions"], "--documents", inputs["documents"], "--output", output,
            "--model", model, "--every-document", *SHARD_SIZE, "--by-document-csv", "--review", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def every_run(inputs, tiny_bert_model) -> Path:
    output = Path(inputs["root"]) / "every"
    assert run_job(*every_args(inputs, tiny_bert_model, output), *FLAGS) == 0
    return output


@pytest.fixture(scope="module")
def named_run(inputs, tiny_bert_model) -> Path:
    """The same pairs as questions that each name their one document, in an ordinary run."""
    output = Path(inputs["root"]) / "named"
    args = ["--questions", inputs["named"], "--documents", inputs["documents"], "--output", output]
    assert run_job(*args, "--model", tiny_bert_model, *FLAGS) == 0
    return output


def by_document(output: Path) -> list[dict]:
    return sorted(pq.read_table(output / "by_document").to_pylist(), key=lambda row: row["document_id"])


def test_each_pair_is_answered_as_a_question_naming_its_document(every_run: Path, named_run: Path) -> None:
    assert_same_outputs(every_run, named_run, TABLES)
    questions = read_output(every_run, "questions")
    assert [row["question_id"] for row in questions] == sorted(
        pair_id(question, document) for question in QUESTIONS for document in DOCUMENTS
    )
    manifest = json.loads((every_run / "manifest.json").read_text())
    assert manifest["reconciled"] is True
    assert manifest["inputs"]["questions"] == len(QUESTIONS) * len(DOCUMENTS) == manifest["outputs"]["questions"]
    assert manifest["shards"]["total"] == 4  # documents of 6 pairs: 2 a shard
    assert manifest["by_document"] == {"table": str(every_run / "by_document"), "documents": 7, "questions": 3}


def test_the_by_document_table_has_a_row_per_document_with_each_question_s_best_answer(every_run: Path) -> None:
    table = pq.read_table(every_run / "by_document")
    assert table.schema == by_document_schema(list(QUESTIONS))
    columns = ["answer", "score", "no_answer_score", "document_start", "document_end", "answer_page_number", "status"]
    assert table.schema.names == ["document_id", "file_path", "page_number"] + [
        f"{question}__{column}" for question in QUESTIONS for column in columns
    ]
    rows = by_document(every_run)
    assert [row["document_id"] for row in rows] == sorted(DOCUMENTS)  # every document once, blank included
    pages = dict(zip(DOCUMENTS, PAGES, strict=True))
    pairs = {row["question_id"]: row for row in read_output(every_run, "questions")}
    answers = read_output(every_run, "answers")
    statuses = {"answered": "answered", "refused": "refused", "no_documents": "no_answer", "error": "error"}
    for row in rows:
        assert (row["file_path"], row["page_number"]) == (None, pages[row["document_id"]])
        for question in QUESTIONS:
            pair = pairs[pair_id(question, row["document_id"])]
            best = next(
                (
                    answer
                    for answer in answers
                    if answer["question_id"] == pair["question_id"] and answer["answer"] == pair["best_answer"]
                ),
                {},
            )
            expected = {
                "answer": pair["best_answer"],
                "score": pair["best_score"],
                "no_answer_score": pair["no_answer_score"],
                "document_start": best.get("document_start"),
                "document_end": best.get("document_end"),
                "answer_page_number": best.get("answer_page_number"),
                "status": statuses[pair["status"]],
            }
            assert {column: row[f"{question}__{column}"] for column in columns} == expected, (
                row["document_id"],
                question,
            )
    blank = rows[0]
    assert blank["document_id"] == "blank"
    assert [blank[f"{question}__status"] for question in QUESTIONS] == ["no_answer"] * 3
    assert {row[f"{question}__status"] for row in rows[1:] for question in QUESTIONS} <= {"answered", "refused"}


def test_the_csv_copy_equals_the_parquet_table(every_run: Path) -> None:
    schema = by_document_schema(list(QUESTIONS))
    options = pacsv.ConvertOptions(column_types=schema, strings_can_be_null=True)
    copy = pacsv.read_csv(every_run / "by_document.csv", convert_options=options)
    assert copy.schema == schema
    assert copy.to_pylist() == by_document(every_run)  # sorted by document id


def test_review_keeps_the_least_sure_pairs_first(every_run: Path) -> None:
    tasks = json.loads((every_run / "label_studio.json").read_text())
    sure = {}
    for row in read_output(every_run, "questions"):
        if row["status"] != "no_documents":  # a pair without text has nothing to review
            sure[row["question_id"]] = row["best_score"] if row["status"] == "answered" else row["no_answer_score"]
    least = sorted(sure, key=lambda key: sure[key])[:4]
    assert [task["data"]["question_id"] for task in tasks] == least
    for task in tasks:
        question, document = task["data"]["question_id"].split("/", 1)
        assert (task["data"]["question"], task["data"]["context"]) == (QUESTIONS[question], DOCUMENTS[document])


def test_a_folder_corpus_names_the_file_and_page_of_each_answer(inputs, tiny_bert_model) -> None:
    root = Path(inputs["root"])
    folder = root / "files"
    folder.mkdir()
    (folder / "report.pdf").write_bytes(pdf_bytes([TEXTS[0][:200], TEXTS[1][:200], TEXTS[2][:200]]))
    (folder / "notes.txt").write_text(TEXTS[3][:300], encoding="utf-8")
    output = root / "files-out"
    args = ["--questions", inputs["questions"], "--documents", folder, "--output", output, "--every-document"]
    assert run_job(*args, "--model", tiny_bert_model, *FLAGS) == 0
    rows = by_document(output)
    assert [(row["document_id"], row["file_path"], row["page_number"]) for row in rows] == [
        ("notes.txt", "notes.txt", 1),  # a text file is one page
        ("report.pdf", "report.pdf", 1),
    ]
    content = pq.read_table(output / "_corpus" / "documents").to_pylist()
    texts = {row["id"]: row["content"] for row in content}
    answers = [row for row in read_output(output, "answers") if row["answer"] is not None]
    assert {row["file_path"] for row in answers} == {"notes.txt", "report.pdf"}
    for row in rows:
        for question in QUESTIONS:
            start = row[f"{question}__document_start"]
            if row[f"{question}__status"] == "answered":
                text = texts[row["document_id"]]
                assert text[start : row[f"{question}__document_end"]] == row[f"{question}__answer"]
                assert row[f"{question}__answer_page_number"] == 1 + text[:start].count("\f")


def test_a_killed_run_resumes_to_the_tables_of_a_clean_run(inputs, tiny_bert_model, every_run: Path) -> None:
    output = Path(inputs["root"]) / "killed"
    args = [*map(str, every_args(inputs, tiny_bert_model, output)), *FLAGS, "--shards-per-wave", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = subprocess.Popen([sys.executable, "-m", "jobs.bulk_qa", *args], cwd=REPO, env=env)
    kill_at_first_commit(job, output, 120)
    committed = {path.name for path in (output / "_shards").glob("*.json")}
    assert 1 <= len(committed) < 4 and not (output / "manifest.json").exists()
    assert run_job(*args) == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["shards"] == {"total": 4, "committed": 4, "resumed": len(committed)}
    assert_same_outputs(output, every_run, TABLES)
    assert_rows_match(by_document(output), by_document(every_run), "by_document")


def test_filters_restrict_the_documents_each_question_is_asked_of(inputs, tiny_bert_model, named_run: Path) -> None:
    """
    `--filters` ANDed with the questions' own: the pairs that match are answered as without filters (the same rows),
    the others are not asked: no questions or answers rows, and in by_document null cells with status `filtered`.
    """
    common = {"field": "meta.page_number", "operator": "!=", "value": 7}  # a null page_number matches it
    own = {
        "supplier": {"field": "meta.page_number", "operator": ">=", "value": 2},
        "date": None,
        "total-amount": {"field": "id", "operator": "in", "value": ["doc-1", "doc-2", "blank"]},
    }
    root = Path(inputs["root"]) / "filtered"
    questions = write_table(root / "questions.parquet", {
        "id": list(QUESTIONS), "query": list(QUESTIONS.values()),
        "filters": pa.array([json.dumps(own[key]) if own[key] else None for key in QUESTIONS], pa.string()),
    })  # fmt: skip
    output = root / "out"
    args = ["--questions", questions, "--documents", inputs["documents"], "--output", output, "--every-document",
            "--filters", json.dumps(common), *SHARD_SIZE]  # fmt: skip
    assert run_job(*args, "--model", tiny_bert_model, *FLAGS) == 0
    documents = {key: HaystackDocument(id=key, content=text, meta={"page_number": page})
                 for (key, text), page in zip(DOCUMENTS.items(), PAGES, strict=True)}  # fmt: skip
    asked = {
        pair_id(question, key)
        for question, filters in own.items()
        for key, document in documents.items()
        if document_matches_filter({"operator": "AND", "conditions": [common, *([filters] if filters else [])]},
                                   document)
    }  # fmt: skip
    assert len(asked) == 6 + 2 + 3  # date: all but doc-4 (page 7); supplier: doc-0, doc-5; total-amount: 3
    for table in TABLES:
        expected = [row for row in read_output(named_run, table) if row["question_id"] in asked]
        assert_rows_match(read_output(output, table), expected, table)
    rows = by_document(output)
    assert [row["document_id"] for row in rows] == sorted(DOCUMENTS)  # a row per document, asked or not
    statuses = {row["document_id"]: row["supplier__status"] for row in rows}
    assert statuses["doc-0"] != "filtered" and statuses["doc-1"] == statuses["doc-4"] == "filtered"
    for row in rows:
        for question in QUESTIONS:
            filtered = pair_id(question, row["document_id"]) not in asked
            assert (row[question_column(question, "status")] == "filtered") == filtered
            if filtered:
                assert all(row[question_column(question, name)] is None for name in ("answer", "score",
                                                                                      "no_answer_score"))  # fmt: skip
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["reconciled"], manifest["by_document"]["documents"]) == (True, len(DOCUMENTS))


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("empty", "the questions table has no rows: there is nothing to answer"),
        (
            "filter field",
            "bulk-qa: error: --filters: The filter reads the field 'meta.author', which the documents do "
            "not hold (they hold: meta.page_number).\n",
        ),
        ("bad id", "question id 'total amount' cannot name the by_document table's columns"),
        ("index", "--every-document reads every document and retrieves nothing, so --index"),
        ("ranker", "--every-document reads every document and retrieves nothing to rank, so --ranker"),
        ("named", "the questions table has a 'document_ids' column, but --every-document asks each question"),
        ("csv alone", "by_document_csv writes the table of an every_document run: add --every-document"),
    ],
)
def test_bad_input_is_refused_with_one_line_before_any_work(inputs, tiny_bert_model, case, message, capsys) -> None:
    root = Path(inputs["root"]) / "bad" / case.replace(" ", "-")
    questions, extra, every = inputs["questions"], [], ["--every-document"]
    if case == "empty":
        questions = write_table(
            root / "q.parquet", {"id": pa.array([], pa.string()), "query": pa.array([], pa.string())}
        )
    elif case == "bad id":
        questions = write_table(
            root / "q.parquet", {"id": ["supplier", "total amount"], "query": ["Who?", "How much?"]}
        )
    elif case == "index":
        extra = ["--index", root / "index"]
    elif case == "ranker":
        extra = ["--ranker", root / "ranker"]
    elif case == "named":
        questions = inputs["named"]
    elif case == "filter field":
        extra = ["--filters", '{field: meta.author, operator: "==", value: x}']
    else:
        every, extra = [], ["--by-document-csv"]
    output = root / "out"
    args = ["--questions", questions, "--documents", inputs["documents"], "--output", output, *every, *extra]
    capsys.readouterr()
    assert run_job(*args, "--model", tiny_bert_model, *FLAGS) == 2
    error = capsys.readouterr().err
    assert message in error and error.startswith("bulk-qa: error: ")
    assert not output.exists()


def test_ray_gives_the_in_process_tables(local_ray, inputs, tiny_bert_model, every_run: Path, tmp_path) -> None:
    output = tmp_path / "ray"
    flags = [flag if flag != "in-process" else "ray" for flag in FLAGS]
    assert run_job(*every_args(inputs, tiny_bert_model, output), *flags, "--cpus-per-actor", "0.25") == 0
    assert_same_outputs(output, every_run, TABLES)
    assert_rows_match(by_document(output), by_document(every_run), "by_document")
