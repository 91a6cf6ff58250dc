"""
Retrieval over passages (`split_length` / `split_overlap`): the job retrieves the passages Haystack's
`DocumentSplitter` + `InMemoryBM25Retriever` retrieve, reads them as Haystack's reader does, reports answers at
offsets in the source documents, and keeps a span read in two overlapping passages once. One job run serves
the module; the bad settings and the refused resumes exit 2 before Ray starts.
"""

import json
import math
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from haystack import Document as HaystackDocument
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from jobs import index as index_command
from jobs.bulk_qa import driver, main
from jobs.bulk_qa.workers.aggregate import RefusalSettings, question_result
from jobs.bulk_qa.workers.rows import AGGREGATION_SCHEMA, CANDIDATE, PAIR, SEQUENCE
from jobs.bulk_qa.workers.tokenize import tokenize
from jobs.indexing.build import build_index, write_index
from jobs.indexing.plan import INDEX_FOLDER
from jobs.indexing.record import BUILD_FILE, shard_locations
from jobs.passages import PASSAGES_FILE, SOURCE_IDS_FILE, SOURCES_FILE, Passages
from jobs.retrieval.retrieve import RetrieveDocuments
from jobs.retrieval.stages import shard_stages
from jobs.retrieval_settings import RetrievalSettings
from qa_core import Document, ExtractiveReader
from qa_core.models import ModelSettings
from qa_core.retrieval.store import PassageStore
from qa_core.selection import SelectionSettings
from qa_core.tokenization import TokenizationSettings
from tests.jobs.bulk_qa.test_retrieval import (  # noqa: F401 (a fixture)
    fails_before_ray,
    no_ray_for_bad_input,
    overwrite_pages,
    record_ids,
)
from tests.jobs.conftest import (
    TEXTS,
    assert_same_outputs,
    by_question,
    read_output,
    run_job,
    write_corpus,
    write_table,
)
from tests.jobs.driver_reads import DriverReads

SPLIT_LENGTH, SPLIT_OVERLAP, TOP_K = 12, 4, 3
# Every span of up to 3 tokens is a candidate (200 per sequence) and every answer is kept (top_k 1000, no overlap
# de-duplication), so that a span of an overlap is read in both passages and only the job's own rule drops one.
READER = {"top_k": 1000, "max_seq_length": 96, "stride": 16, "context_window_size": 40, "overlap_threshold": None,
          "answers_per_seq": 200, "max_answer_length": 3}  # fmt: skip
FLAGS = [f"--{key.replace('_', '-')}={'none' if value is None else value}" for key, value in READER.items()]
FLAGS += [f"--retriever-top-k={TOP_K}", f"--split-length={SPLIT_LENGTH}", f"--split-overlap={SPLIT_OVERLAP}"]
RARE = ["zephyr", "quokka", "marmalade"]  # words 8-10 of document "dx": in the overlap of its first two passages
RETRIEVED = {
    "s01": "What does the function return?",
    "s02": "How are the items of a list sorted?",
    "s03": f"Where is the {' '.join(RARE)}?",
    "s04": "zzzqqq",  # no indexed term: no passages
}
GIVEN = {"g01": ("What is returned?", ["d00"])}  # names its document: reads it whole


def _documents() -> dict[str, str | None]:
    """Ten long documents, "dx" with the rare words in an overlap, one empty (no passage), one without content."""
    documents = {f"d{i:02d}": text[:500] for i, text in enumerate(text for text in TEXTS if len(text) >= 500)}
    words = next(text for text in TEXTS if len(text.split(" ")) >= 30).split(" ")[:30]
    words[8:11] = RARE
    return {**dict(list(documents.items())[:10]), "dx": " ".join(words), "blank": "", "no-content": None}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("split-retrieval")
    documents = _documents()
    questions = {**{key: (query, None) for key, query in RETRIEVED.items()}, **GIVEN}
    return {"root": root, "paths": write_corpus(root, documents, questions), "documents": documents}


def _haystack_passages(documents: dict[str, str | None]) -> list[HaystackDocument]:
    """The documents split by Haystack's own DocumentSplitter (by word)."""
    splitter = DocumentSplitter(split_by="word", split_length=SPLIT_LENGTH, split_overlap=SPLIT_OVERLAP)
    sources = [HaystackDocument(id=key, content=text) for key, text in documents.items() if text is not None]
    return splitter.run(sources)["documents"]


@pytest.fixture(scope="module")
def haystack_hits(corpus: dict) -> dict[str, list[HaystackDocument]]:
    """Haystack's own pipeline: DocumentSplitter (by word) into InMemoryBM25Retriever (BM25L, its defaults)."""
    store = InMemoryDocumentStore()
    store.write_documents(_haystack_passages(corpus["documents"]))
    retriever = InMemoryBM25Retriever(document_store=store, top_k=TOP_K)
    return {key: retriever.run(query=query)["documents"] for key, query in RETRIEVED.items()}


@pytest.fixture(scope="module")
def driver_reads() -> DriverReads:
    return DriverReads()


@pytest.fixture(scope="module")
def job_output(local_ray, corpus: dict, tiny_bert_model: Path, driver_reads: DriverReads) -> Path:
    """The module's one run, building its index of passages; what reaches its driver is recorded."""
    output = corpus["root"] / "out"
    patch = pytest.MonkeyPatch()
    driver_reads.install(patch)
    try:
        status = run_job(*_job_args(corpus, output, tiny_bert_model), *FLAGS)
    finally:
        patch.undo()
    assert status == 0
    return output


def _job_args(corpus: dict, output: Path, model: Path) -> list:
    paths = corpus["paths"]
    return ["--questions", paths["questions"], "--documents", paths["documents"], "--output", output, "--model", model]


def test_retrieval_equals_haystacks_splitter_and_retriever(job_output: Path, haystack_hits: dict) -> None:
    questions = {row["question_id"]: row for row in read_output(job_output, "questions")}
    assert haystack_hits["s04"] == [] and all(len(haystack_hits[key]) == TOP_K for key in ("s01", "s02", "s03"))
    assert sorted((hit.meta["source_id"], hit.meta["split_id"]) for hit in haystack_hits["s03"][:2]) == [
        ("dx", 0),
        ("dx", 1),
    ]  # the two passages sharing the rare words
    for key, hits in haystack_hits.items():
        row = questions[key]
        assert row["retrieved_passage_ids"] == [hit.id for hit in hits], key
        assert row["retrieved_document_ids"] == [hit.meta["source_id"] for hit in hits], key
        assert row["retrieval_scores"] == pytest.approx([hit.score for hit in hits], rel=1e-6), key
        # One window per passage (the answers test below relies on it): the reader read the passages, not documents.
        assert row["n_documents"] == row["n_sequences"] == len(hits), key
    assert questions["s04"]["status"] == "no_documents"
    given = questions["g01"]
    assert (given["retrieved_document_ids"], given["retrieved_passage_ids"], given["retrieval_scores"]) == (None,) * 3
    assert (given["n_documents"], given["status"]) == (1, "answered") and given["n_sequences"] > 1


def test_answers_are_the_readers_on_the_passages_at_offsets_in_their_documents(
    job_output: Path, haystack_hits: dict, corpus: dict, tiny_bert_model: Path
) -> None:
    """
    Each question's answers are `ExtractiveReader.run`'s on its retrieved passages, with their document's id and
    offsets there, a span read in two passages kept once with its better score.
    """
    reader = ExtractiveReader(model=str(tiny_bert_model), **READER)
    reader.warm_up()
    answers = by_question(read_output(job_output, "answers"))
    read_twice = 0
    for key, hits in haystack_hits.items():
        rows = answers.get(key, [])
        if not hits:
            assert rows == [], key
            continue
        expected = _reader_answers_in_documents(reader, RETRIEVED[key], hits)
        spans = {(row["document_id"], row["document_start"], row["document_end"]): row for row in rows if row["answer"]}
        assert len(spans) == len(rows) - 1 == len({span for span, _ in expected}), key  # each span once, + no-answer
        scores = {hit.id: hit.score for hit in hits}
        for span, copies in _copies(expected).items():
            row, (best, best_passage, context) = spans[span], copies[0]
            assert corpus["documents"][span[0]][span[1] : span[2]] == row["answer"], (key, span)
            assert (row["score"], row["context"]) == (pytest.approx(best, abs=1e-4), context), (key, span)
            if len(copies) > 1:
                read_twice += 1
                if copies[0][0] - copies[1][0] > 1e-3:  # clearly the better copy: its passage is the one named
                    assert row["passage_id"] == best_passage, (key, span)
            assert row["retrieval_score"] == pytest.approx(scores[row["passage_id"]], rel=1e-6)
        no_answer = next(row for row in rows if row["answer"] is None)
        distinct = [copies[0][0] for copies in _copies(expected).values()]
        assert no_answer["score"] == pytest.approx(math.prod(1 - score for score in distinct), abs=1e-4)
    assert read_twice >= 3  # the spans of the rare words' overlap, at least


def _reader_answers_in_documents(reader: ExtractiveReader, query: str, hits: list) -> list:
    """The reader's answers on the passages, best first, as ((document, start, end), (score, passage, context))."""
    passages = [Document(content=hit.content, id=hit.id) for hit in hits]
    starts = {hit.id: (hit.meta["source_id"], hit.meta["split_idx_start"]) for hit in hits}
    found = []
    for answer in reader.run(query, passages)["answers"]:
        if answer.data is None:
            continue
        source, start = starts[answer.document.id]
        span = (source, start + answer.document_offset.start, start + answer.document_offset.end)
        found.append((span, (answer.score, answer.document.id, answer.context)))
    return found


def _copies(found: list) -> dict:
    """Each span's copies (one per passage that read it), best first."""
    copies: dict = {}
    for span, copy in found:
        copies.setdefault(span, []).append(copy)
    return copies


def test_questions_naming_their_documents_read_them_whole(job_output: Path, corpus: dict) -> None:
    rows = [row for row in read_output(job_output, "answers") if row["question_id"] == "g01" and row["answer"]]
    text = corpus["documents"]["d00"]
    assert rows and all(row["passage_id"] is None and row["retrieval_score"] is None for row in rows)
    assert all(text[row["document_start"] : row["document_end"]] == row["answer"] for row in rows)
    first_passage = len(" ".join(text.split(" ")[:SPLIT_LENGTH]))
    assert max(row["document_end"] for row in rows) > first_passage


def test_manifest_and_index_record_the_splitting(job_output: Path, corpus: dict, driver_reads) -> None:
    manifest = json.loads((job_output / "manifest.json").read_text())
    record = manifest["index"]
    n_passages = len(_haystack_passages(corpus["documents"]))
    assert (record["split_length"], record["split_overlap"], record["source"]) == (SPLIT_LENGTH, SPLIT_OVERLAP, "built")
    assert (record["documents"], record["source_documents"]) == (n_passages, 11)
    assert (manifest["config"]["split_length"], manifest["config"]["split_overlap"]) == (SPLIT_LENGTH, SPLIT_OVERLAP)
    assert manifest["reconciled"] is True
    assert (job_output / INDEX_FOLDER / PASSAGES_FILE).exists()
    # Neither documents nor passages reached the driver through Ray (it reads contents only to build the index).
    assert [name for name, columns in driver_reads.columns if "content" in columns] == []


def test_over_a_split_index_the_job_reads_only_the_documents_of_its_passages(
    job_output: Path, corpus: dict, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Every question retrieved for, over an index of passages in 2 shards built by `jobs.index` (on Ray): the reader
    reads its passages' ranges of their documents, read from the shards' stores of source documents (each hit's
    document once), then the result files' contexts from the same stores by id; the documents table is never read
    (its pages overwritten once indexed). The questions' rows are those of the module's run, which joined the
    documents table, and the result files those of the same run over the index with the table joined.
    """
    documents = corpus["root"] / "documents-read.parquet"
    shutil.copy2(corpus["paths"]["documents"], documents)
    index = corpus["root"] / "index-read"
    split = [f"--split-length={SPLIT_LENGTH}", f"--split-overlap={SPLIT_OVERLAP}"]
    build = ["--documents", str(documents), "--output", str(index), "--index-shards", "2", *split]
    assert index_command.main(build) == 0
    retrieved = {"id": list(RETRIEVED), "query": list(RETRIEVED.values())}
    questions = write_table(corpus["root"] / "retrieved.parquet", retrieved)
    flags = ["--questions", questions, "--documents", documents, "--index", index, "--model", tiny_bert_model]
    flags += [*FLAGS, "--engine", "in-process"]
    joined = corpus["root"] / "out-read-joined"
    with monkeypatch.context() as patched:  # the stores left unused: the documents table read and joined
        patched.setattr(driver, "given_store", lambda *args: False)
        patched.setattr(driver, "reads_store", lambda plan, *args: plan)
        assert run_job(*flags, "--output", joined) == 0
    overwrite_pages(documents)
    read: list[str | None] = []  # the ids of the documents read from the stores; None where the results start
    take, write_results = PassageStore.take, driver.write_results
    monkeypatch.setattr(PassageStore, "take", lambda store, positions: record_ids(read, take(store, positions)))
    monkeypatch.setattr(driver, "write_results", lambda *args: read.append(None) or write_results(*args))
    output = corpus["root"] / "out-read"
    assert run_job(*flags, "--output", output) == 0
    rows = read_output(output, "questions")
    assert [row["question_id"] for row in rows] == list(RETRIEVED)
    hits = [hit for row in rows for hit in row["retrieved_document_ids"] or []]
    assert len(hits) == 3 * TOP_K > len(set(hits))  # s04 finds none; dx's two passages, one document
    fetched, contexts = read[: read.index(None)], read[read.index(None) + 1 :]
    assert sorted(fetched) == sorted(set(hits))
    annotated = json.loads((output / "annotated.squad.json").read_text())
    assert sorted(contexts) == sorted({article["title"] for article in annotated["data"]}) != []
    assert "documents_join" not in json.loads((output / "manifest.json").read_text())
    for table in ("questions", "answers"):
        expected = [row for row in read_output(job_output, table) if row["question_id"] in RETRIEVED]
        found = read_output(output, table)
        assert [row.keys() for row in found] == [row.keys() for row in expected]
        for row, expected_row in zip(found, expected, strict=True):  # in this process, the module's run on Ray
            for key, value in row.items():
                assert value == pytest.approx(expected_row[key], abs=1e-6), (table, row["question_id"], key)
    assert_same_outputs(output, joined, ("questions", "answers"))
    for name in ("predictions.json", "na_probs.json", "annotated.squad.json", "label_studio.json"):
        assert json.loads((output / name).read_text()) == json.loads((joined / name).read_text()), name


def test_resume_with_other_splitting_is_refused(
    capsys: pytest.CaptureFixture, job_output: Path, corpus: dict, tiny_bert_model: Path
) -> None:
    before = (job_output / "manifest.json").read_text()
    flags = [flag for flag in FLAGS if not flag.startswith("--split-length")] + ["--split-length=10"]
    assert main([str(arg) for arg in _job_args(corpus, job_output, tiny_bert_model)] + flags) == 2
    error = capsys.readouterr().err
    assert "holds the output of a run with other settings (split_length)" in error, error
    assert (job_output / "manifest.json").read_text() == before


def test_index_built_with_other_splitting_is_refused(
    capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, tiny_bert_model: Path
) -> None:
    index = tmp_path / "index"
    build = ["--documents", corpus["paths"]["documents"], "--output", str(index), "--split-length", "10"]
    assert index_command.main(build) == 0
    capsys.readouterr()
    args = [*_job_args(corpus, tmp_path / "out", tiny_bert_model)[:-4], "--index", index, "--model", tiny_bert_model]
    error = fails_before_ray(capsys, tmp_path / "out", *args, f"--split-length={SPLIT_LENGTH}")
    assert f"--index {index} was built with split_length 10, split_overlap 0, not this run's split_length 12" in error
    error = fails_before_ray(capsys, tmp_path / "out", *args)
    assert "not this run's split_length None and split_overlap 0" in error


def test_a_split_index_of_the_earlier_layout_is_refused(
    capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, tiny_bert_model: Path
) -> None:
    """
    An index of passages in `passages.json`, without stores of their documents: the job and `--add` refuse it; a run
    resuming over one it saved builds it again.
    """
    index = tmp_path / "index"
    split = ["--split-length", str(SPLIT_LENGTH), "--split-overlap", str(SPLIT_OVERLAP)]
    assert index_command.main(["--documents", corpus["paths"]["documents"], "--output", str(index), *split]) == 0
    _as_earlier_layout(index)
    capsys.readouterr()
    message = f"--index {index}: an index of split passages built by an earlier version (no store of their source "
    message += "documents): rebuild it with `python -m jobs.index`."
    args = [*_job_args(corpus, tmp_path / "out", tiny_bert_model)[:-4], "--index", index, "--model", tiny_bert_model]
    assert message in fails_before_ray(capsys, tmp_path / "out", *args, *split)
    assert index_command.main(["--add", corpus["paths"]["documents"], "--index", str(index)]) == 2
    assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="an index of split passages of an earlier version .* rebuild it"):
        Passages.load(index)
    own = [*_job_args(corpus, tmp_path / "own", tiny_bert_model), *split, "--engine", "in-process"]
    assert run_job(*own) == 0
    answers = read_output(tmp_path / "own", "answers")
    _as_earlier_layout(tmp_path / "own" / INDEX_FOLDER)
    assert run_job(*own) == 0  # resumed: every shard committed, the index built again
    assert Passages.load(tmp_path / "own" / INDEX_FOLDER) is not None
    assert read_output(tmp_path / "own", "answers") == answers


def _as_earlier_layout(index: Path) -> None:
    """An index folder of one shard of split passages made as an earlier version left it (`passages.json`)."""
    for name in (PASSAGES_FILE, SOURCE_IDS_FILE, SOURCES_FILE):
        (index / name).unlink()
    (index / "passages.json").write_text(json.dumps({"source_ids": [], "starts": [], "ends": []}))
    record = json.loads((index / BUILD_FILE).read_text())
    (index / BUILD_FILE).write_text(json.dumps({**record, "store": False, "store_document_columns": []}))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--split-length", "0"], "split_length must be >= 1, not 0"),
        (["--split-length", "4", "--split-overlap", "-1"], "split_overlap must be >= 0, not -1"),
        (["--split-length", "4", "--split-overlap", "4"], "split_overlap must be less than split_length 4, not 4"),
        (["--split-overlap", "2"], "split_overlap must be 0 without split_length, not 2"),
    ],
)
def test_split_option_errors(capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, flags, message) -> None:
    paths = corpus["paths"]
    error = fails_before_ray(capsys, tmp_path / "out", "--questions", paths["questions"], "--documents",
                             paths["documents"], *flags)  # fmt: skip
    assert message in error
    build = ["--documents", paths["documents"], "--output", str(tmp_path / "index"), *flags]
    assert index_command.main(build) == 2
    assert message in capsys.readouterr().err


def test_sharded_passage_retrieval_equals_one_index(tmp_path: Path, corpus: dict, haystack_hits: dict) -> None:
    """The chained shard stages carry the passages' documents and ranges: 1 and 3 shards give the same rows."""
    batch = pa.table({"id": list(RETRIEVED), "query": list(RETRIEVED.values())})
    results = []
    for n_shards in (1, 3):
        settings = RetrievalSettings(index_shards=n_shards, split_length=SPLIT_LENGTH, split_overlap=SPLIT_OVERLAP)
        location = str(tmp_path / f"index{n_shards}")
        write_index(build_index(settings, corpus["paths"]["documents"]), location)
        rows = batch
        for stage in shard_stages(shard_locations(location, n_shards), 2):  # 3 shards: a stage of one, one of two
            rows = RetrieveDocuments(stage, retriever_top_k=TOP_K)(rows)
        results.append(rows.drop_columns(["retrieved_positions"]).to_pylist())
    assert results[0] == results[1]
    for row in results[0]:
        hits = haystack_hits[row["id"]]
        assert row["passage_ids"] == [hit.id for hit in hits]
        assert row["passage_starts"] == [hit.meta["split_idx_start"] for hit in hits]
        texts = [corpus["documents"][key][start:end] for key, start, end in
                 zip(row["document_ids"], row["passage_starts"], row["passage_ends"], strict=True)]  # fmt: skip
        assert texts == [hit.content for hit in hits]


# --- The stages on their own, on hand-made rows (no Ray) -------------------------------------------------------


def test_a_passage_pair_reads_its_range_at_offsets_in_the_document(tiny_bert_model: Path, tmp_path: Path) -> None:
    """The sequences of a passage's range are those of the passage read alone, moved to the document's offsets."""
    content = "Page one has words.\fPage two has more words in it.\fPage three ends the text."
    start, end = content.index("Page two"), content.index("ends")
    pair = {"shard": 0, "question_id": "q", "kind": PAIR, "query": "Which page?", "position": 0, "document_id": "s",
            "page_number": 7, "known": True}  # fmt: skip
    settings = (ModelSettings(str(tiny_bert_model)), None, TokenizationSettings(max_seq_length=14, stride=2),
                SelectionSettings(context_window_size=10), str(tmp_path))  # fmt: skip
    ranged = {**pair, "content": content, "passage_start": start, "passage_end": end}
    alone = {**pair, "content": content[start:end], "page_number": 8}
    rows, expected = (tokenize(pa.Table.from_pylist([row]), *settings).to_pylist() for row in (ranged, alone))
    assert len(rows) == len(expected) > 1  # a few windows
    for row, passage_row in zip(rows, expected, strict=True):
        tokens = slice(row["context_start"], row["context_end"])
        assert row["input_ids"] == passage_row["input_ids"]
        assert row["char_starts"][tokens] == [offset + start for offset in passage_row["char_starts"][tokens]]
        assert row["char_ends"][tokens] == [offset + start for offset in passage_row["char_ends"][tokens]]
        assert (row["window_text"], row["window_offset"]) == (
            passage_row["window_text"],
            passage_row["window_offset"] + start,
        )
        assert row["first_page"] == passage_row["first_page"] >= 8


# --- The de-duplication rule on its own, on hand-made rows (no model) -------------------------------------------


def _note(kind: str, position: int, **values) -> dict:
    return {**dict.fromkeys(AGGREGATION_SCHEMA.names), "kind": kind, "position": position, **values}


def _candidate(position: int, document_id: str, start: int, score: float, rank: int = 0) -> dict:
    return _note(CANDIDATE, position, document_id=document_id, start=start, end=start + 3, score=score,
                 answer=f"{document_id}{start}", sequence_index=0, rank=rank)  # fmt: skip


def test_a_span_read_in_several_passages_is_kept_once_before_top_k() -> None:
    """
    Kept from the passage where it scores best (the first retrieved on a tie), before the cut to top_k; the same
    offsets in another document are another span; copies within one passage stay, as the reader keeps them.
    """
    question = {"question_id": "q", "query": "?", "error": None, "document_ids": ["s", "s", "t"],
                "passage_ids": ["p0", "p1", "p2"], "retrieval_scores": [3.0, 2.0, 1.0]}  # fmt: skip
    candidates = [
        _candidate(0, "s", 10, 0.6), _candidate(0, "s", 0, 0.5, rank=1), _candidate(0, "s", 30, 0.3, rank=2),
        _candidate(1, "s", 10, 0.8), _candidate(1, "s", 20, 0.4, rank=1), _candidate(1, "s", 30, 0.3, rank=2),
        _candidate(1, "s", 40, 0.2, rank=3), _candidate(1, "s", 40, 0.1, rank=4), _candidate(2, "t", 10, 0.7),
    ]  # fmt: skip
    sequences = [_note(SEQUENCE, position, null_logit=0.0, best_logit=1.0) for position in range(3)]
    kept = []
    for top_k in (4, 10):
        selection = SelectionSettings(top_k=top_k, overlap_threshold=None)
        row, answers = question_result(question, sequences + candidates, selection, RefusalSettings())
        kept.append([(a.document.id, a.document_offset.start, a.meta["passage_id"]) for a in answers if a.data])
    assert kept[0] == [("s", 10, "p1"), ("t", 10, "p2"), ("s", 0, "p0"), ("s", 20, "p1")]
    assert kept[1] == kept[0] + [("s", 30, "p0"), ("s", 40, "p1"), ("s", 40, "p1")]
    assert row["n_documents"] == 3 and row["retrieved_passage_ids"] == ["p0", "p1", "p2"]
