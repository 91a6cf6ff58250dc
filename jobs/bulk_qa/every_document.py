"""
`--every-document`: each question of the questions table (`id`, `query`) asked of every document of
`--documents`, without retrieval: the extraction of the same fields from every document of a corpus.

Each (question, document) pair is answered as a question that names that one document in `document_ids` would
be: its id is the pair's (`pair_id`: `<question id>/<document id>`), and it goes through the same tokenize, reader
and aggregation stages (`jobs.bulk_qa.waves.commit_pairs`, `workers.aggregate.shard_results`), so that its rows of
the `questions` and `answers` tables are those of such a run. The work is sharded by document: an output shard
holds the pairs of a set of documents with every question (`shard_size` pairs, rounded to whole documents); a
wave reads each of its documents once and makes its pairs with all the questions, which the reader batches across
documents; each shard commits its `questions`, `answers` and `by_document` tables together, so that a killed run
resumes by shards of documents.

`by_document/` holds one row per document (`BY_DOCUMENT_SCHEMA`), then for each question, in the questions
table's order, the columns of `QUESTION_COLUMNS_SCHEMA` named `<question id>__<column>`: a question id must
therefore be a usable column name (`QUESTION_ID`), which is checked before any work.

With metadata filters (`--filters`, the questions' `filters` column: `jobs.bulk_qa.filtering`), a question is asked
only of the documents its filter matches: the other pairs are not read and have no row in the `questions` and
`answers` tables; their cells of the by_document table are null, with the status `filtered`.
"""

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from jobs.bulk_qa.config import JobConfig
from jobs.bulk_qa.filtering import RunFilters, documents_mask, filtered_fields
from jobs.bulk_qa.ids import check_ids_in_driver
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.waves import ActorResources, Inputs, commit_pairs
from jobs.bulk_qa.workers.aggregate import commit, shard_results
from jobs.bulk_qa.workers.explode import JOINED_DOCUMENT_COLUMNS, document_columns, query_error
from jobs.bulk_qa.workers.rows import (
    AGGREGATION_SCHEMA,
    DOCUMENT_COLUMNS,
    PAIR,
    PAIRS_SCHEMA,
    QUESTION,
    in_wave,
    shard_of,
    table,
)
from jobs.engines import Engine
from jobs.ingest.folder import InputFolder
from jobs.metadata import META_COLUMN, read_metadata
from jobs.retrieval.retrieve import FILTERS
from jobs.storage import InputError, ShardStore, parquet_dataset, redact
from jobs.table_schema import described_schema
from jobs.tables import DOCUMENTS, QUESTIONS, read_ids, table_rows
from qa_core.answers import ExtractedAnswer
from qa_core.refusal import RefusalSettings
from qa_core.selection import SelectionSettings

BY_DOCUMENT = "by_document"  # the table's folder in the output folder
BY_DOCUMENT_CSV = "by_document.csv"  # its copy for spreadsheets (`--by-document-csv`)
# A question id names columns of the by_document table: letters, digits, `_` and `-`, as every tool takes them.
QUESTION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
PAIR_SEPARATOR = "/"  # never in a question id, so that a pair id splits at its first one
COLUMN_SEPARATOR = "__"  # between a question id and the name of its column in the by_document table

BY_DOCUMENT_SCHEMA, BY_DOCUMENT_DESCRIPTIONS = described_schema(
    [
        ("document_id", pa.string(), "the document's id, as in the documents table"),
        ("file_path", pa.string(), "the file it came from (a folder corpus, or the table's file_path); else null"),
        ("page_number", pa.int64(), "its first page (a folder corpus's paged files, or the table's); else null"),
    ]
)
QUESTION_COLUMNS_SCHEMA, QUESTION_COLUMNS_DESCRIPTIONS = described_schema(
    [
        ("answer", pa.string(), "the answer given: null unless status is answered"),
        ("score", pa.float64(), "its score: null unless answered"),
        ("no_answer_score", pa.float64(), "the no-answer probability of --no-answer-source; null if nothing was read"),
        ("document_start", pa.int64(), "the answer's character offsets in the document: null unless answered"),
        ("document_end", pa.int64(), "exclusive"),
        ("answer_page_number", pa.int64(), "the page of the answer, when the document is paged"),
        (
            "status",
            pa.string(),
            "answered, refused, no_answer (nothing to read: no content), error, or filtered (the question's metadata "
            "filter does not match the document: not asked)",
        ),
    ]
)
# The questions table's statuses as the by_document table names them.
STATUSES = {"answered": "answered", "refused": "refused", "no_documents": "no_answer", "error": "error"}
FILTERED = "filtered"  # a pair whose question's filter does not match its document (not asked): its row's kind


def pair_id(question_id: str, document_id: str) -> str:
    """The id of a (question, document) pair: its row's `question_id` in the questions and answers tables."""
    return f"{question_id}{PAIR_SEPARATOR}{document_id}"


def split_pair_id(pair: str) -> tuple[str, str]:
    """A pair id's question id and document id."""
    question_id, document_id = pair.split(PAIR_SEPARATOR, 1)
    return question_id, document_id


def question_column(question_id: str, column: str) -> str:
    """The name of a question's `column` (of `QUESTION_COLUMNS_SCHEMA`) in the by_document table."""
    return f"{question_id}{COLUMN_SEPARATOR}{column}"


def by_document_schema(question_ids: list[str]) -> pa.Schema:
    """The by_document table's schema for these questions, in their order."""
    per_question = [
        pa.field(question_column(question_id, field.name), field.type)
        for question_id in question_ids
        for field in QUESTION_COLUMNS_SCHEMA
    ]
    return pa.schema([*BY_DOCUMENT_SCHEMA, *per_question])


def check_every_document(config: JobConfig, squad: bool, questions: pa.Schema) -> None:
    """
    Refuses, before any work, what `--every-document` cannot run: a SQuAD file or `--pool-contexts`, no
    `--documents`, an `--index`, a `--ranker`, `--replies`, a questions table that names its documents (`document_ids` or
    `context`), and question ids that cannot name the by_document table's columns (`QUESTION_ID`).

    :raises InputError: Naming the option, column or id.
    """
    work = config.work
    shown = redact(work.questions)
    if squad or work.pool_contexts:
        raise InputError(
            f"{shown}: --every-document asks a Parquet questions table (id, query) of every document of "
            "--documents; SQuAD input and --pool-contexts carry their own contexts: run without --every-document."
        )
    if not work.documents:
        raise InputError("--every-document asks every question of every document of --documents: give --documents.")
    if config.retrieval.index is not None:
        raise InputError(
            f"--every-document reads every document and retrieves nothing, so --index "
            f"{redact(config.retrieval.index)} would not be used: leave it out."
        )
    if config.ranking.ranker is not None:
        raise InputError(
            f"--every-document reads every document and retrieves nothing to rank, so --ranker "
            f"{redact(config.ranking.ranker)} would not be used: leave it out."
        )
    if work.replies:
        raise InputError(
            f"--every-document answers (question, document) pairs, which generator replies of --replies "
            f"{redact(work.replies)} (by question id) cannot name: leave it out."
        )
    named = [name for name in ("document_ids", "context") if name in questions.names]
    if named:
        raise InputError(
            f"{shown}: the questions table has a '{named[0]}' column, but --every-document asks each question of "
            "every document: drop the column, or run without --every-document to read the documents it names."
        )
    for question_id in read_ids(work.questions, QUESTIONS).to_pylist():
        if question_id is not None and not QUESTION_ID.fullmatch(question_id):
            raise InputError(
                f"{shown}: question id {question_id!r} cannot name the by_document table's columns "
                f"(<question id>{COLUMN_SEPARATOR}answer, ...): with --every-document a question id holds only "
                "letters, digits, '_' and '-' (at most 64): rename it."
            )


def estimated_pairs(config: JobConfig, corpus: InputFolder | None) -> int:
    """
    The run's pairs before a folder corpus is converted (its files counted as one document each), to choose
    the engine.
    """
    documents = len(corpus.paths) if corpus is not None else table_rows(config.work.documents)
    return table_rows(config.work.questions) * documents


def document_shards(
    questions: str, documents: str, shard_size: int, filters: RunFilters | None = None
) -> tuple[int, int, dict[int, int]]:
    """
    The run's pairs, its output shards (each `shard_size // questions` documents, at least one, placed by a hash
    of their ids) and the pairs each shard holds, once both tables' ids are checked (read in the driver); with
    `filters`, the pairs asked: those whose question's filter matches the document (the documents' metadata read,
    not their texts).

    :raises InputError: When an id column holds nulls, empty strings or duplicates.
    """
    question_ids, document_ids = read_ids(questions, QUESTIONS), read_ids(documents, DOCUMENTS)
    check_ids_in_driver([(QUESTIONS, questions, question_ids), (DOCUMENTS, documents, document_ids)], 1)
    n_questions, n_documents = len(question_ids), len(document_ids)
    num_shards = max(1, math.ceil(n_documents / max(1, shard_size // n_questions)))
    if filters is None:
        shards = [shard_of(document_id, num_shards) for document_id in document_ids.cast(pa.string()).to_pylist()]
        per_shard = Counter(shards)
        return n_questions * n_documents, num_shards, {shard: n * n_questions for shard, n in per_shard.items()}
    metadata = read_metadata(documents, filters.fields)
    shards = [shard_of(document_id, num_shards) for document_id in metadata["id"].cast(pa.string()).to_pylist()]
    asked = sum(documents_mask(metadata, each, filters.fields).astype(int) for each in filters.filters)
    per_shard = Counter(dict.fromkeys(shards, 0))
    for shard, pairs in zip(shards, asked.tolist() if n_questions else [0] * len(shards), strict=True):
        per_shard[shard] += pairs
    return sum(per_shard.values()), num_shards, dict(per_shard)


def read_inputs(config: JobConfig, engine: Engine, num_shards: int, filters: RunFilters | None = None) -> Inputs:
    """
    The run's inputs: the documents as the dataset each wave reads its shards' documents from (with `filters`,
    also the metadata they read), and the questions (with `filters`, each one's as JSON: `FILTERS`).
    """
    work = config.work
    names = parquet_dataset(work.documents).schema.names
    columns = [name for name in JOINED_DOCUMENT_COLUMNS if name in names]
    if filters is not None:
        columns += [name for name in (*filters.fields, META_COLUMN) if name in names and name not in columns]
    documents = engine.read_parquet(work.documents, columns)
    questions = parquet_dataset(work.questions).to_table(columns=["id", "query"])
    if filters is not None:
        questions = questions.append_column(FILTERS, pa.array([json.dumps(each) for each in filters.filters]))
    return Inputs(engine, documents, None, None, None, None, False, num_shards, every_document=questions)


def _asked(batch: pa.Table, questions: pa.Table) -> list[list[bool]]:
    """Whether each question (by row) is asked of each document of the batch: its filter matches it."""
    if FILTERS not in questions.column_names:
        return [[True] * batch.num_rows for _ in range(questions.num_rows)]
    filters = [json.loads(text) for text in questions[FILTERS].to_pylist()]
    fields = filtered_fields(filters)
    masks = {}
    for each in filters:
        key = json.dumps(each, sort_keys=True)
        if key not in masks:
            masks[key] = documents_mask(batch, each, fields).tolist()
    return [masks[json.dumps(each, sort_keys=True)] for each in filters]


def _wave_documents(
    batch: pa.Table, num_shards: int, shards: frozenset[int]
) -> tuple[pa.Table, list[tuple[int, int, dict[str, Any]]]]:
    """
    The batch's documents of the wave's shards (only those become Python rows: every wave reads the whole table),
    and each (as `document_columns` gives it) with its shard and its row among them.
    """
    wave, placed = in_wave(batch, num_shards, shards)
    documents = document_columns(wave).to_pylist()
    return wave, [(shard, at, document) for at, (shard, document) in enumerate(zip(placed, documents, strict=True))]


def document_pairs(batch: pa.Table, questions: pa.Table, num_shards: int, shards: frozenset[int]) -> pa.Table:
    """
    The wave's documents -> one `pair` row per question that can be asked, carrying the document: each document
    read once for all its questions, with no join.
    """
    wave, documents = _wave_documents(batch, num_shards, shards)
    asked = _asked(wave, questions)
    rows = [
        {
            "shard": shard,
            "question_id": pair_id(question["id"], document["id"]),
            "kind": PAIR,
            "query": question["query"],
            "position": 0,
            "document_id": document["id"],
            **{name: document[name] for name in ("content", "page_number", "file_path", "known")},
        }
        for shard, at, document in documents
        for question, matches in zip(questions.to_pylist(), asked, strict=True)
        if matches[at] and query_error(question["query"]) is None
    ]
    return table(rows, pa.schema(list(PAIRS_SCHEMA) + DOCUMENT_COLUMNS))


def pair_question_rows(batch: pa.Table, questions: pa.Table, num_shards: int, shards: frozenset[int]) -> pa.Table:
    """
    The wave's documents -> one `question` row per (question, document) pair, as a question naming the document
    alone would have, with the document's file and page for the by_document table; a pair whose question's filter
    does not match the document is of kind `FILTERED` instead (no question of the tables: `aggregate_documents`).
    """
    wave, documents = _wave_documents(batch, num_shards, shards)
    asked = _asked(wave, questions)
    rows = [
        {
            "shard": shard,
            "question_id": pair_id(question["id"], document["id"]),
            "kind": QUESTION if matches[at] else FILTERED,
            "query": question["query"],
            "error": query_error(question["query"]),
            "document_ids": [document["id"]],
            "file_path": document["file_path"],
            "page_number": document["page_number"],
        }
        for shard, at, document in documents
        for question, matches in zip(questions.to_pylist(), asked, strict=True)
    ]
    return table(rows, AGGREGATION_SCHEMA)


def answer_documents_wave(
    config: JobConfig,
    inputs: Inputs,
    shards: frozenset[int],
    wave_pairs: int,
    pool: ActorResources,
    on_commit: Callable[[dict[str, Any]], None],
) -> None:
    """`waves.answer_wave` for `--every-document`: the pairs of the documents of `shards`, answered and committed."""
    wave = {"questions": inputs.every_document, "num_shards": inputs.num_shards, "shards": shards}
    tasks = {"num_cpus": inputs.engine.task_cpus}
    ShardStore(config.run.output).delete_pair_notes(shards)  # those an earlier attempt at these shards left
    pairs = inputs.questions.map_batches(document_pairs, batch_format="pyarrow", fn_kwargs=wave, **tasks)
    rows = inputs.questions.map_batches(pair_question_rows, batch_format="pyarrow", fn_kwargs=wave, **tasks)
    aggregation = {
        "selection": config.selection,
        "refusal": config.refusal,
        "output": config.run.output,
        "question_ids": inputs.every_document["id"].to_pylist(),
    }
    commit_pairs(
        config, inputs, pairs, [rows], len(shards), wave_pairs, pool, aggregate_documents, aggregation, on_commit
    )


def aggregate_documents(
    group: pa.Table, selection: SelectionSettings, refusal: RefusalSettings, output: str, question_ids: list[str]
) -> pa.Table:
    """
    `workers.aggregate.aggregate_shard` for a shard of documents: its pairs' questions and answers tables, and its
    documents' by_document rows, committed together. Returns the shard's completion marker, as one row.
    """
    shard = group["shard"][0].as_py()
    # A filtered pair's row (kind FILTERED) is no question of the tables: `shard_results` reads notes by question.
    tables, marker, results = shard_results(group, selection, refusal, None, output)
    kinds = pc.is_in(group["kind"], value_set=pa.array([QUESTION, FILTERED]))
    documents = {row["document_ids"][0]: row for row in group.filter(kinds).to_pylist()}
    rows = [by_document_row(documents[key], question_ids, results, refusal) for key in sorted(documents)]
    tables[BY_DOCUMENT] = pa.Table.from_pylist(rows, schema=by_document_schema(question_ids))
    return commit(output, shard, tables, {**marker, "documents": len(rows)})


def by_document_row(
    document: dict[str, Any],
    question_ids: list[str],
    results: dict[str, tuple[dict[str, Any], list[ExtractedAnswer]]],
    refusal: RefusalSettings,
) -> dict[str, Any]:
    """
    A document's by_document row, from one of its pairs' `question` rows (`document`) and each pair's questions
    table row and answers (`results`, by pair id).
    """
    document_id = document["document_ids"][0]
    row = {"document_id": document_id, "file_path": document["file_path"], "page_number": document["page_number"]}
    for question_id in question_ids:
        if pair_id(question_id, document_id) not in results:  # filtered: not asked
            row.update({question_column(question_id, name): None for name in QUESTION_COLUMNS_SCHEMA.names})
            row[question_column(question_id, "status")] = FILTERED
            continue
        result, answers = results[pair_id(question_id, document_id)]
        answered = result["status"] == "answered"
        best = next(answer for answer in answers if answer.data is not None) if answered else None
        values = {
            "answer": result["best_answer"],
            "score": result["best_score"],
            "no_answer_score": refusal.no_answer(result["no_answer_score"], result["model_no_answer_score"]),
            "document_start": best.document_offset.start if best else None,
            "document_end": best.document_offset.end if best else None,
            "answer_page_number": best.meta.get("answer_page_number") if best else None,
            "status": STATUSES[result["status"]],
        }
        row.update((question_column(question_id, name), value) for name, value in values.items())
    return row


def pair_questions(questions: dict[str, list[Any]], pairs: list[str]) -> dict[str, list[Any]]:
    """
    The pairs as the questions of a run that names their documents (`id`, `query`, `document_ids`), from the
    questions table's `id` and `query` columns: what the result files (`jobs.bulk_qa.results`) read.
    """
    queries = dict(zip(questions["id"], questions["query"], strict=True))
    split = [split_pair_id(pair) for pair in pairs]
    return {
        "id": list(pairs),
        "query": [queries[question_id] for question_id, _ in split],
        "document_ids": [[document_id] for _, document_id in split],
    }


def write_by_document(output: OutputFolder, shards: list[int], question_ids: list[str], csv: bool) -> dict[str, Any]:
    """
    What the manifest records of the by_document table (where it is, its documents and questions) and, with
    `csv`, its copy `by_document.csv` written from the committed shards, sorted by document id.
    """
    whole = output.read_shards(BY_DOCUMENT, shards, by_document_schema(question_ids).names).sort_by("document_id")
    table = {"table": output.table_path(BY_DOCUMENT), "documents": whole.num_rows, "questions": len(question_ids)}
    record: dict[str, Any] = {"by_document": table}
    if not csv:
        return {**record, "result_files": []}
    sink = pa.BufferOutputStream()
    pacsv.write_csv(whole, sink)
    output.write_file(sink.getvalue().to_pybytes(), BY_DOCUMENT_CSV)
    return {**record, "result_files": [BY_DOCUMENT_CSV]}
