"""
Metadata filters in the bulk job: `--filters` ANDed with the questions' `filters` column give the documents, order,
scores and answers of Haystack's `InMemoryBM25Retriever` with those filters -> `ExtractiveReader`, in-process and on
Ray (over an index built by Ray Data in other shards: its filter fields equal the in-process build's); questions
that name `document_ids` keep those that match; every bad filter is refused before any work with one line naming
the question or option (exit 2). Small data and the tiny model; one Ray for the module.
"""

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from haystack import Document as HaystackDocument
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils.filters import document_matches_filter

from jobs import index as index_command
from jobs.bulk_qa import driver, main
from jobs.engines import RayEngine
from jobs.indexing.build import build_index, write_index
from jobs.indexing.filter_fields import add_filter_fields
from jobs.indexing.plan import INDEX_FOLDER
from jobs.indexing.record import BUILD_FILE, shard_locations
from jobs.retrieval.retrieve import FilterMasks, RetrieveDocuments
from jobs.retrieval_settings import RetrievalSettings
from qa_core import Document, ExtractiveReader
from qa_core.retrieval.filter_fields import read_filter_fields
from qa_core.retrieval.filters import FilterError
from tests.jobs.conftest import TEXTS, assert_same_outputs, by_question, read_output, run_job, write_table

TOP_K = 3
SETTINGS = {"top_k": 3, "max_seq_length": 64, "stride": 16, "context_window_size": 40}
FLAGS = ["--top-k", "3", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "40"]
FLAGS += ["--retriever-top-k", str(TOP_K), "--shard-size", "3"]
COMMON = {"field": "meta.year", "operator": ">=", "value": 2001}  # --filters: every question
OWN = {  # each question's filters column
    "r1": {"field": "meta.kind", "operator": "==", "value": "b"},
    "r2": None,
    "r3": {"operator": "OR", "conditions": [{"field": "meta.year", "operator": "in", "value": [2003, 2004]},
                                            {"field": "meta.published", "operator": "<", "value": "2012-03-01"}]},
    "r4": {"operator": "NOT", "conditions": [{"field": "meta.kind", "operator": "==", "value": "a"}]},
    "g1": {"field": "meta.kind", "operator": "==", "value": "a"},
}  # fmt: skip
QUERIES = {
    "r1": "What does the function return?",
    "r2": "Which exception is raised when the key is missing?",
    "r3": "How are the items of a list sorted?",
    "r4": "what is a module",
    "g1": "What is returned?",
}
NAMED = {"g1": ["d00", "d01", "d02", "d03", "unknown"]}  # d00, d03: kind b (`metadata`)


def metadata(index: int) -> dict[str, Any]:
    """Document `index`'s metadata: d09 has no year (missing: a `>=` never matches it, as in Haystack)."""
    return {
        "year": None if index == 9 else 2000 + index % 5,
        "kind": "b" if index % 3 == 0 else "a",
        "published": f"{2010 + index % 4}-0{1 + index % 5}-15",
    }


def combined(key: str) -> dict[str, Any]:
    return {"operator": "AND", "conditions": [COMMON, OWN[key]]} if OWN[key] else COMMON


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("filtered-jobs")
    texts = {f"d{i:02d}": TEXTS[i * 7][:350] for i in range(30)}
    metas = [metadata(i) for i in range(30)]
    documents = write_table(
        root / "documents.parquet",
        {"id": list(texts), "content": list(texts.values()), **{key: [m[key] for m in metas] for key in metas[0]}},
    )
    questions = write_table(
        root / "questions.parquet",
        {
            "id": list(QUERIES),
            "query": list(QUERIES.values()),
            "document_ids": pa.array([NAMED.get(key) for key in QUERIES], pa.list_(pa.string())),
            "filters": pa.array([json.dumps(OWN[key]) if OWN[key] else None for key in QUERIES], pa.string()),
        },
    )
    pairs = zip(texts.items(), metas, strict=True)
    haystack = [HaystackDocument(id=key, content=text, meta=meta) for (key, text), meta in pairs]
    return {"root": root, "documents": documents, "questions": questions, "haystack": haystack}


def job_args(corpus: dict, output: Path, model: Path, *more: Any) -> list:
    return ["--questions", corpus["questions"], "--documents", corpus["documents"], "--output", output,
            "--model", model, "--filters", json.dumps(COMMON), *FLAGS, *more]  # fmt: skip


@pytest.fixture(scope="module")
def in_process_output(corpus: dict, tiny_bert_model: Path) -> Path:
    output = corpus["root"] / "in-process"
    assert run_job(*job_args(corpus, output, tiny_bert_model, "--engine", "in-process", "--index-shards", "2")) == 0
    return output


@pytest.fixture(scope="module")
def ray_index(local_ray, corpus: dict) -> Path:
    """The index built by Ray Data (`jobs.index`), in 3 shards where the in-process run builds 2."""
    index = corpus["root"] / "ray-index"
    build = ["--documents", corpus["documents"], "--output", str(index), "--index-shards", "3"]
    assert index_command.main([*build, "--filter-fields", "[year, kind, published]"]) == 0
    return index


@pytest.fixture(scope="module")
def ray_output(local_ray, ray_index: Path, corpus: dict, tiny_bert_model: Path) -> Path:
    output = corpus["root"] / "ray"
    assert run_job(*job_args(corpus, output, tiny_bert_model, "--engine", "ray", "--index", ray_index)) == 0
    return output


@pytest.fixture(scope="module")
def haystack_hits(corpus: dict) -> dict[str, list]:
    """Haystack's InMemoryBM25Retriever with each retrieved question's filters."""
    store = InMemoryDocumentStore()
    store.write_documents(corpus["haystack"])
    retriever = InMemoryBM25Retriever(document_store=store, top_k=TOP_K)
    return {key: retriever.run(query=QUERIES[key], filters=combined(key))["documents"] for key in QUERIES if
            key not in NAMED}  # fmt: skip


def test_filtered_retrieval_and_answers_equal_haystacks_pipeline(
    in_process_output: Path, haystack_hits: dict, corpus: dict, tiny_bert_model: Path
) -> None:
    questions = {row["question_id"]: row for row in read_output(in_process_output, "questions")}
    answers = by_question(read_output(in_process_output, "answers"))
    reader = ExtractiveReader(model=str(tiny_bert_model), **SETTINGS)
    reader.warm_up()
    for key, hits in haystack_hits.items():
        assert len(hits) == TOP_K, key  # selective filters, never fewer than top_k while enough match
        row = questions[key]
        assert row["retrieved_document_ids"] == [hit.id for hit in hits], key
        assert row["retrieval_scores"] == pytest.approx([hit.score for hit in hits], rel=1e-6), key
        expected = reader.run(QUERIES[key], [Document(content=hit.content, id=hit.id) for hit in hits])["answers"]
        assert [(a["answer"], a["document_id"]) for a in answers[key]] == [
            (answer.data, answer.document.id if answer.document else None) for answer in expected
        ], key
        assert [a["score"] for a in answers[key]] == pytest.approx([answer.score for answer in expected], abs=1e-4)
    # The named documents that match (d01, d02: kind a, year >= 2001), and the unknown id, reported as without one.
    by_id = {document.id: document for document in corpus["haystack"]}
    matching = [key for key in NAMED["g1"] if key not in by_id or document_matches_filter(combined("g1"), by_id[key])]
    assert matching == ["d01", "d02", "unknown"]
    assert {a["document_id"] for a in answers["g1"] if a["document_id"]} <= {"d01", "d02"}
    assert (questions["g1"]["n_documents"], questions["g1"]["error"]) == (
        2,
        "unknown document ids: 'unknown' (the known documents were read)",
    )


def test_ray_gives_the_in_process_tables_over_an_index_built_by_ray(ray_output: Path, in_process_output: Path) -> None:
    assert_same_outputs(ray_output, in_process_output, ("questions", "answers"))


def test_filtered_search_over_the_sharded_index_built_by_ray_equals_the_in_process_one(
    ray_index: Path, in_process_output: Path, haystack_hits: dict
) -> None:
    indexes = [ray_index, in_process_output / INDEX_FOLDER]
    records = [json.loads((index / BUILD_FILE).read_text()) for index in indexes]
    assert [(record["shards"], record["filter_fields"]) for record in records] == [
        (3, ["year", "kind", "published"]),
        (2, ["year", "kind", "published"]),  # by default, every scalar metadata column
    ]
    kept = [
        pa.Table.from_pydict(read_filter_fields(Path(folder), mmap=False))
        for index, record in zip(indexes, records, strict=True)
        for folder in shard_locations(str(index), record["shards"])
    ]
    assert pa.concat_tables(kept[:3]).equals(pa.concat_tables(kept[3:]))
    keys = list(haystack_hits)
    batch = pa.table({"id": keys, "query": [QUERIES[key] for key in keys],
                      "filters": [json.dumps(OWN[key]) if OWN[key] else None for key in keys]})  # fmt: skip
    found = [
        RetrieveDocuments(shard_locations(str(index), record["shards"]), TOP_K, COMMON)(batch).to_pylist()
        for index, record in zip(indexes, records, strict=True)
    ]
    assert found[0] == found[1]
    for row in found[0]:
        assert row["document_ids"] == [hit.id for hit in haystack_hits[row["id"]]]


def test_split_passages_are_filtered_by_their_documents_metadata(corpus: dict, tmp_path: Path) -> None:
    """An index of passages keeps each passage's source document's fields: Haystack's splitter copies its meta."""
    settings = RetrievalSettings(split_length=20, split_overlap=5, index_shards=2)
    write_index(build_index(settings, corpus["documents"]), str(tmp_path))
    record = json.loads((tmp_path / BUILD_FILE).read_text())
    add_filter_fields(str(tmp_path), record, corpus["documents"], None)
    splitter = DocumentSplitter(split_by="word", split_length=20, split_overlap=5)
    passages = splitter.run([HaystackDocument(id=doc.id, content=doc.content) for doc in corpus["haystack"]])
    metas = {document.id: document.meta for document in corpus["haystack"]}
    for passage in passages["documents"]:  # set once its id (which would hash it) is made, as the index's ids
        passage.meta.update(metas[passage.meta["source_id"]])
    store = InMemoryDocumentStore()
    store.write_documents(passages["documents"])
    retriever = InMemoryBM25Retriever(document_store=store, top_k=TOP_K)
    keys = [key for key in QUERIES if key not in NAMED]
    batch = pa.table({"id": keys, "query": [QUERIES[key] for key in keys],
                      "filters": [json.dumps(OWN[key]) if OWN[key] else None for key in keys]})  # fmt: skip
    found = RetrieveDocuments(shard_locations(str(tmp_path), 2), TOP_K, COMMON)(batch).to_pylist()
    for row in found:
        hits = retriever.run(query=QUERIES[row["id"]], filters=combined(row["id"]))["documents"]
        assert row["passage_ids"] == [hit.id for hit in hits], row["id"]
        assert row["document_ids"] == [hit.meta["source_id"] for hit in hits], row["id"]
        assert row["retrieval_scores"] == pytest.approx([hit.score for hit in hits], rel=1e-6), row["id"]


def test_a_shard_without_the_fields_a_filter_reads_fails_loudly() -> None:
    """A shard kept without a field (a stale copy) fails its search, never treating the field as missing."""
    masks = FilterMasks({"id": pa.array(["a", "b"]), "meta.kind": pa.array(["x", "y"])}, offset=3, n_docs=2)
    assert masks.mask(json.dumps(None)) is None
    kind = {"field": "meta.kind", "operator": "==", "value": "y"}
    assert masks.mask(json.dumps(kind)).tolist() == [False, False, False, False, True]  # by corpus position
    with pytest.raises(FilterError, match=r"^The filter reads the field 'meta.year', which the index does not keep"):
        masks.mask(json.dumps(COMMON))


# --- Bad filters: one line, exit 2, before any work ----------------------------------------------------------


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job fails the test if it gets as far as starting Ray."""
    start_engine = driver.start_engine

    def start_no_ray(run, engine, *args, **kwargs):
        if isinstance(engine, RayEngine):
            raise AssertionError("the job started Ray for unusable input")
        return start_engine(run, engine, *args, **kwargs)

    monkeypatch.setattr(driver, "start_engine", start_no_ray)


@pytest.mark.parametrize(
    ("filters", "own", "message"),
    [
        ('{field: meta.year, operator: like, value: 1}', None,
         "filters: Unknown comparison operator 'like'. Valid operators are: ['!=', '<', '<=', '==', '>', '>=', 'in', "
         "'not in']"),
        ("[1, 2]", None, "filters: A filter must be a dictionary, not list: [1, 2]."),
        ('{operator: AND, conditions: {field: meta.year}}', None,
         "filters: 'conditions' must be a list of filters in {'operator': 'AND', 'conditions': {'field': "
         "'meta.year'}}"),
        (None, '{"field": "meta.year", "operator": ">"', "Question 'r2': its filters are not JSON (Expecting ','"),
        (None, '{"field": "meta.year", "operator": ">", "value": [2001]}',
         "Question 'r2': its filters: Filter value can't be of type <class 'list'> using operators '>', '>=', '<', "
         "'<='"),
        (None, '{"field": "meta.year", "value": 1}', "Question 'r2': its filters: Invalid filter syntax. See https://docs.haystack.deepset.ai/docs/metadata-filtering"),
        ('{field: meta.author, operator: "==", value: x}', None,
         "bulk-qa: error: --filters: The filter reads the field 'meta.author', which the index does not keep (it "
         "keeps: meta.kind, meta.published, meta.year)."),
        (None, '{"field": "content", "operator": "==", "value": "x"}',
         "Question 'r2': The filter reads the field 'content', which the index does not keep"),
    ],
)  # fmt: skip
def test_bad_filters_are_refused_before_any_work(
    no_ray, capsys: pytest.CaptureFixture, corpus: dict, tiny_bert_model: Path, tmp_path: Path, filters, own, message
) -> None:
    questions = corpus["questions"]
    if own is not None:  # r2's filter replaced
        column = [own if key == "r2" else json.dumps(OWN[key]) if OWN[key] else None for key in QUERIES]
        questions = write_table(tmp_path / "questions.parquet", {"id": list(QUERIES), "query": list(QUERIES.values()),
                                                                 "filters": column})  # fmt: skip
    args = ["--questions", questions, "--documents", corpus["documents"], "--output", tmp_path / "out",
            "--model", tiny_bert_model, *(["--filters", filters] if filters else [])]  # fmt: skip
    assert main([str(arg) for arg in args]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") <= 2, error  # "Invalid configuration:" and its one problem
    assert not (tmp_path / "out").exists()


def test_a_filter_on_a_field_the_index_does_not_keep_is_refused(
    no_ray, capsys: pytest.CaptureFixture, corpus: dict, tiny_bert_model: Path, tmp_path: Path
) -> None:
    """`--filter-fields` chooses what the index keeps: a filter on another field, or an unknown field, is refused."""
    output = tmp_path / "out"
    args = job_args(corpus, output, tiny_bert_model, "--engine", "in-process", "--filter-fields", "[kind]")
    assert main([str(arg) for arg in args]) == 2
    assert capsys.readouterr().err == (
        "bulk-qa: error: --filters: The filter reads the field 'meta.year', which the index does not keep (it keeps: "
        "meta.kind).\n"
    )
    assert not output.exists()
    missing = ["--documents", corpus["documents"], "--output", str(tmp_path / "index"), "--filter-fields", "[x]"]
    assert index_command.main(missing) == 2
    assert capsys.readouterr().err == (
        f"jobs.index: error: --filter-fields: {corpus['documents']}: the documents have no scalar metadata field 'x' "
        "(they have: year, kind, published).\n"
    )
