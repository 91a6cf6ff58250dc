"""The job's stages run in-process on Arrow tables, without Ray: each question's answers equal reader.run's."""

import dataclasses
import shutil
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jobs.bulk_qa.workers.aggregate import aggregate_shard
from jobs.bulk_qa.workers.explode import (
    PART,
    document_columns,
    explode_pairs,
    join_document_part,
    question_rows,
    with_document_part,
    write_document_part,
)
from jobs.bulk_qa.workers.read import ReadSequences
from jobs.bulk_qa.workers.rows import PAIRS_SCHEMA, SEQUENCE, shard_of
from jobs.bulk_qa.workers.tokenize import tokenize
from jobs.storage import PAIR_NOTES, ShardStore, shard_name
from qa_core import Document, ExtractiveReader
from qa_core.inference import InferenceSettings
from qa_core.models import ModelSettings
from qa_core.refusal import RefusalSettings
from qa_core.selection import SelectionSettings
from qa_core.tokenization import TokenizationSettings
from tests.jobs.conftest import TEXTS, by_question, read_output

TOKENIZATION = TokenizationSettings(max_seq_length=48, stride=12)
SELECTION = SelectionSettings(top_k=3, context_window_size=40, overlap_threshold=0.01)


CONTENTS = {"a": TEXTS[5][:700], "b": "Page one.\fPage two: " + TEXTS[9][:300], "c": None}
QUESTIONS = pa.table(
    {
        "id": ["q1", "q2", "q3"],
        "query": ["What is returned?", "Which page?", "Where?"],
        "document_ids": [["a", "b"], ["b", "c", "zz"], ["c"]],
    }
)


@dataclasses.dataclass(frozen=True)
class Read:
    """The reader stage's output rows, and the run folder that the tokenize stage wrote its pair notes to."""

    rows: pa.Table
    folder: Path


def aggregate(read: Read, output: Path, selection: SelectionSettings = SELECTION) -> pa.Table:
    """The aggregation of the questions' work rows (question rows joined in, as before aggregation in the job),
    committed to `output`, which gets the run's pair notes first."""
    shutil.copytree(read.folder / PAIR_NOTES, output / PAIR_NOTES)
    questions = question_rows(QUESTIONS, num_shards=1, shards=frozenset({0}), squad=False)
    return aggregate_shard(pa.concat_tables([read.rows, questions]), selection, RefusalSettings(), None, str(output))


N_PARTS = 16  # parts of the documents: "zz" (no such document) falls in a part that holds none


def _groups(table: pa.Table) -> list[pa.Table]:
    """The table's rows grouped by `PART`, as `groupby(PART).map_groups` hands them over."""
    return [table.filter(pc.equal(table[PART], part)) for part in sorted(set(table[PART].to_pylist()))]


@pytest.fixture(scope="module")
def candidates(tiny_roberta_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Read:
    """The work rows of the questions, through every stage up to the reader (in-process), the documents joined
    as a documents table too large to broadcast is: split into parts in the run's folder, each part's pairs
    joined with that part's file. The reader receives sequences only: the unknown document's note is in the
    run's folder."""
    documents = pa.table({"id": list(CONTENTS), "content": list(CONTENTS.values()), "page_number": [None, 7, None]})
    output = str(tmp_path_factory.mktemp("run"))
    parts = with_document_part(document_columns(documents), column="id", n_parts=N_PARTS)
    written = pa.concat_tables(write_document_part(group, output) for group in _groups(parts))
    assert sorted(written["documents"].to_pylist()) == [1, 1, 1]  # a, b and c each fall in a part of their own
    assert shard_of("zz", N_PARTS) not in written["part"].to_pylist()
    pairs = explode_pairs(QUESTIONS, num_shards=1, shards=frozenset({0}), squad=False)
    pairs = with_document_part(pairs, column="document_id", n_parts=N_PARTS)
    work = pa.concat_tables(join_document_part(group, output) for group in _groups(pairs))
    assert sorted(zip(work["document_id"].to_pylist(), work["known"].to_pylist(), strict=True)) == [
        ("a", True), ("b", True), ("b", True), ("c", True), ("c", True), ("zz", None)
    ]  # fmt: skip
    model = ModelSettings(str(tiny_roberta_model))
    sequences = tokenize(work, model, None, TOKENIZATION, SELECTION, output)
    assert set(sequences["kind"].to_pylist()) == {SEQUENCE}
    assert [
        (note["question_id"], note["position"], note["error"]) for note in ShardStore(output).read_pair_notes(0)
    ] == [("q2", 2, "unknown document id 'zz'")]
    return Read(ReadSequences(model, InferenceSettings(), SELECTION, None, cpu_threads=1)(sequences), Path(output))


def test_stages_in_process_equal_reader_run(candidates: Read, tiny_roberta_model: Path, tmp_path: Path) -> None:
    summary = aggregate(candidates, tmp_path)
    assert summary["shard"].to_pylist() == [0]

    reader = ExtractiveReader.from_settings(ModelSettings(str(tiny_roberta_model)), TOKENIZATION, SELECTION)
    reader.warm_up()
    pages = {"b": {"page_number": 7}}
    answers = by_question(read_output(tmp_path, "answers"))
    for question in QUESTIONS.to_pylist():
        docs = [
            Document(content=CONTENTS[key], id=key, meta=pages.get(key, {}))
            for key in question["document_ids"]
            if key in CONTENTS
        ]
        expected = reader.run(question["query"], docs)["answers"]
        rows = answers.get(question["id"], [])
        assert [row["answer"] for row in rows] == [answer.data for answer in expected]
        assert [row["score"] for row in rows] == pytest.approx([answer.score for answer in expected], abs=1e-6)
        assert [row["context"] for row in rows] == [answer.context for answer in expected]
        assert [row["answer_page_number"] for row in rows] == [
            answer.meta.get("answer_page_number") for answer in expected
        ]
    statuses = {row["question_id"]: (row["status"], row["error"]) for row in read_output(tmp_path, "questions")}
    assert statuses["q2"] == ("error", "unknown document ids: 'zz' (the known documents were read)")
    assert statuses["q3"] == ("no_documents", None)


def test_score_threshold_above_every_answer_refuses(candidates: Read, tmp_path: Path) -> None:
    aggregate(candidates, tmp_path, dataclasses.replace(SELECTION, score_threshold=0.999, no_answer=False))
    assert read_output(tmp_path, "answers") == []
    statuses = {row["question_id"]: (row["status"], row["best_answer"]) for row in read_output(tmp_path, "questions")}
    assert statuses["q1"] == ("refused", None)


def test_shards_are_stable_across_processes() -> None:
    """A crc32 of the id, not Python's per-process salted hash(): a resumed run finds the same shards."""
    assert [shard_of(question_id, 1000) for question_id in ("q1", "q2", "question-42")] == [
        zlib.crc32(b"q1") % 1000,
        zlib.crc32(b"q2") % 1000,
        zlib.crc32(b"question-42") % 1000,
    ]


def test_each_pair_is_noted_once_whatever_tokenize_task_wrote_it(tmp_path: Path) -> None:
    """A retried tokenize task writes its notes again: the same batch to the same file, another batch of the same
    pairs (batched otherwise) to another file, and the shard's aggregation reads each pair's note once."""
    store = ShardStore(str(tmp_path))
    note = {"kind": "pair", "query": "Where?", "error": "unknown document id 'zz'"}
    notes = [{**note, "shard": shard, "question_id": key, "position": 0} for shard, key in [(0, "q1"), (1, "q2")]]
    batch = pa.Table.from_pylist(notes, schema=PAIRS_SCHEMA)
    store.write_pair_notes(batch)
    store.write_pair_notes(batch)
    assert [len(list((tmp_path / PAIR_NOTES / shard_name(shard)).iterdir())) for shard in (0, 1)] == [1, 1]
    store.write_pair_notes(pa.Table.from_pylist([notes[0], {**notes[0], "position": 1}], schema=PAIRS_SCHEMA))
    assert sorted((row["question_id"], row["position"]) for row in store.read_pair_notes(0)) == [("q1", 0), ("q1", 1)]
    assert [row["question_id"] for row in store.read_pair_notes(1)] == ["q2"]
    store.delete_pair_notes(frozenset({0}))
    assert (store.read_pair_notes(0), len(store.read_pair_notes(1))) == ([], 1)
