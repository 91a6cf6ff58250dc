"""
Retrieval in the bulk job: questions without document_ids get the documents Haystack's `InMemoryBM25Retriever`
returns, in its order, and the answers `ExtractiveReader.run` gives on them; an index from `python -m jobs.index`
gives the same output; with `--ranker`, the documents of Haystack's retriever -> `SentenceTransformersSimilarityRanker`
pipeline, on Ray and in-process alike; unusable retrieval input or options exit 2 before Ray starts.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from haystack import Document as HaystackDocument
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_similarity import (
    SentenceTransformersSimilarityRanker,
)

from jobs import index as index_command
from jobs.bulk_qa import driver, main
from jobs.bulk_qa.workers import fetch
from jobs.engines import Engine, RayEngine
from jobs.indexing.build import build_index, write_index
from jobs.indexing.plan import INDEX_FOLDER, prepare_index
from jobs.indexing.record import shard_locations
from jobs.ray_logs import RayLogFilter
from jobs.retrieval.retrieve import RetrieveDocuments
from jobs.retrieval.stages import shard_stages
from jobs.retrieval_settings import RetrievalSettings
from jobs.run_settings import RunSettings
from qa_core import Document, ExtractiveReader
from qa_core.retrieval.store import PassageStore
from tests.jobs.conftest import (
    TEXTS,
    assert_same_outputs,
    by_question,
    read_output,
    run_job,
    write_corpus,
    write_table,
)

TOP_K = 3
SETTINGS = {"top_k": 3, "max_seq_length": 64, "stride": 16, "context_window_size": 40}
FLAGS = ["--top-k", "3", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "40"]
FLAGS += ["--retriever-top-k", str(TOP_K), "--shard-size", "4"]
RETRIEVED = {
    "r01": "What does the function return?",
    "r02": "Which exception is raised when the key is missing?",
    "r03": "How are the items of a list sorted?",
    "r04": "what is a module module module",  # repeated terms count once
    "r05": "zzzqqq",  # no indexed term: no documents
}
# Questions that name their documents, or cannot be asked: never retrieved for.
NOT_RETRIEVED = {"g01": ("What is returned?", ["d00", "d01"]), "e01": ("Anything?", []), "n01": ("   ", None)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """30 real-text documents and one without content; questions with null, given and empty document_ids."""
    root = tmp_path_factory.mktemp("retrieval")
    documents = {f"d{i:02d}": TEXTS[i * 7][:350] for i in range(30)}
    documents["no-content"] = None
    questions = {**{key: (query, None) for key, query in RETRIEVED.items()}, **NOT_RETRIEVED}
    paths = {
        **write_corpus(root, documents, questions),
        # The retrieved questions again, in a table without a document_ids column.
        "retrieved_only": write_table(
            root / "retrieved_only.parquet", {"id": list(RETRIEVED), "query": list(RETRIEVED.values())}
        ),
    }
    return {"root": root, "paths": paths, "documents": documents, "questions": questions}


@pytest.fixture(scope="module")
def haystack_hits(corpus: dict) -> dict[str, list]:
    """What Haystack's own InMemoryBM25Retriever (BM25L, its defaults) returns for each retrieved question."""
    store = InMemoryDocumentStore()
    store.write_documents([HaystackDocument(id=key, content=text) for key, text in corpus["documents"].items()])
    retriever = InMemoryBM25Retriever(document_store=store, top_k=TOP_K)
    return {key: retriever.run(query=query)["documents"] for key, query in RETRIEVED.items()}


@pytest.fixture(scope="module")
def job_output(local_ray, corpus: dict, tiny_bert_model: Path) -> Path:
    """One run that builds the index itself."""
    output = corpus["root"] / "out"
    paths = corpus["paths"]
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--output", output,
        "--model", tiny_bert_model, *FLAGS,
    )  # fmt: skip
    assert status == 0
    return output


def test_questions_without_document_ids_get_haystacks_documents_in_its_order(
    job_output: Path, haystack_hits: dict
) -> None:
    questions = {row["question_id"]: row for row in read_output(job_output, "questions")}
    assert len(haystack_hits["r01"]) == TOP_K and haystack_hits["r05"] == []
    for key, hits in haystack_hits.items():
        row = questions[key]
        assert row["retrieved_document_ids"] == [hit.id for hit in hits], key
        assert row["retrieval_scores"] == pytest.approx([hit.score for hit in hits], rel=1e-6), key
        assert row["n_documents"] == len(hits)
    assert questions["r05"]["status"] == "no_documents"
    for key in NOT_RETRIEVED:
        assert (questions[key]["retrieved_document_ids"], questions[key]["retrieval_scores"]) == (None, None), key
    assert questions["g01"]["n_documents"] == 2
    assert questions["e01"]["status"] == "no_documents"
    assert (questions["n01"]["status"], questions["n01"]["error"]) == ("error", "the query is empty")


def test_answers_equal_reader_run_on_the_retrieved_documents(
    job_output: Path, haystack_hits: dict, corpus: dict, tiny_bert_model: Path
) -> None:
    reader = ExtractiveReader(model=str(tiny_bert_model), **SETTINGS)
    reader.warm_up()
    answers = by_question(read_output(job_output, "answers"))
    checked = 0
    for key, hits in haystack_hits.items():
        documents = [Document(content=hit.content, id=hit.id) for hit in hits]
        expected = reader.run(RETRIEVED[key], documents)["answers"] if documents else []
        rows = answers.get(key, [])
        assert len(rows) == len(expected), key
        scores = {hit.id: hit.score for hit in hits}
        for row, answer in zip(rows, expected, strict=True):
            assert row["answer"] == answer.data
            assert row["score"] == pytest.approx(answer.score, abs=1e-4)
            if answer.data is None:
                assert row["retrieval_score"] is None
                continue
            assert row["document_id"] == answer.document.id
            assert (row["document_start"], row["document_end"]) == (
                answer.document_offset.start,
                answer.document_offset.end,
            )
            assert row["retrieval_score"] == pytest.approx(scores[answer.document.id], rel=1e-6)
            checked += 1
    assert checked >= 9  # 3 span answers for each of the questions with documents
    assert all(row["retrieval_score"] is None for row in answers["g01"])


def test_manifest_records_the_index_saved_with_the_run(job_output: Path, corpus: dict) -> None:
    manifest = json.loads((job_output / "manifest.json").read_text())
    record = manifest["index"]
    assert (record["source"], record["documents"], record["algorithm"]) == ("built", 30, "BM25L")
    assert record["parameters"] == {"k1": 1.5, "b": 0.75, "delta": 0.5}
    assert record["vocabulary"] > 100 and record["build_s"] >= 0
    assert manifest["reconciled"] is True
    assert manifest["config"]["retriever_top_k"] == TOP_K
    assert (job_output / INDEX_FOLDER / "build.json").exists()
    # A resumed run takes the saved index instead of building one (checked without a second run).
    settings = RetrievalSettings(retriever_top_k=TOP_K)
    plan = prepare_index(settings, corpus["paths"]["documents"], str(job_output), resuming=True,
                         distributed=False)  # fmt: skip
    assert (plan.built, plan.record["source"], plan.location) == (None, "resumed", f"{job_output}/{INDEX_FOLDER}")
    assert {key: value for key, value in plan.record.items() if key != "source"} == {
        key: value for key, value in record.items() if key != "source"
    }


def test_an_index_from_jobs_index_gives_the_same_output(
    local_ray, job_output: Path, corpus: dict, tiny_bert_model: Path, capfd: pytest.CaptureFixture
) -> None:
    """
    A questions table without a document_ids column, searched in an index built beforehand, in 3 shards (each
    searched by its own actor, merged exactly) where the first run built 1.
    """
    index = corpus["root"] / "index"
    build = ["--documents", corpus["paths"]["documents"], "--output", str(index), "--index-shards", "3"]
    assert index_command.main(build) == 0
    output = corpus["root"] / "out-given-index"
    status = run_job(
        "--questions", corpus["paths"]["retrieved_only"], "--documents", corpus["paths"]["documents"],
        "--index", index, "--output", output, "--model", tiny_bert_model, *FLAGS,
    )  # fmt: skip
    assert status == 0
    record = json.loads((output / "manifest.json").read_text())["index"]
    assert (record["source"], record["shards"]) == ("given", 3)
    assert record["vocabulary"] == json.loads((job_output / "manifest.json").read_text())["index"]["vocabulary"]
    assert not (output / INDEX_FOLDER).exists()
    assert_same_retrieved(output, job_output)
    # The index updated since (`--update`, a new version): the run is not resumed over it (capfd, not capsys: this
    # test starts Ray, unlike the bad-input tests `no_ray_for_bad_input` watches)
    table = pq.read_table(corpus["paths"]["documents"])
    ids, contents = table["id"].to_pylist(), table["content"].to_pylist()
    contents[3] = "The function returns the sorted list of the module's items."  # changed; two deleted, one added
    changed_path = write_table(corpus["root"] / "documents-changed.parquet",
                               {"id": ids[2:] + ["new"], "content": contents[2:] + ["A missing key raises an error."]})
    assert index_command.main(["--update", changed_path, "--index", str(index)]) == 0
    status = run_job(
        "--questions", corpus["paths"]["retrieved_only"], "--documents", corpus["paths"]["documents"],
        "--index", index, "--output", output, "--model", tiny_bert_model, *FLAGS,
    )  # fmt: skip
    assert status == 2
    assert f"{output}: holds the output of a run with other input files (index)." in capfd.readouterr().err
    # A job over the updated index gives the tables of a job over a fresh build of the same documents.
    fresh = corpus["root"] / "index-fresh"
    assert index_command.main(["--documents", changed_path, "--output", str(fresh), "--index-shards", "3"]) == 0
    outputs = {}
    for name, folder in (("updated", index), ("fresh", fresh)):
        outputs[name] = corpus["root"] / f"out-{name}-index"
        status = run_job(
            "--questions", corpus["paths"]["retrieved_only"], "--documents", changed_path, "--index", folder,
            "--output", outputs[name], "--model", tiny_bert_model, *FLAGS, "--engine", "in-process",
        )  # fmt: skip
        assert status == 0
    assert_same_outputs(outputs["updated"], outputs["fresh"], ("questions", "answers"))


def test_over_an_index_the_job_reads_only_the_passages_it_retrieved(
    job_output: Path, corpus: dict, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Every question retrieved for: the hits' texts are read from the index's passage stores by position, each hit once,
    then the result files' contexts from the same stores, each annotated question's once; the documents table is
    never read (once the index is built its pages are overwritten, its footer, size and modification time kept: a
    read of any row fails). The answers are those of the run that joined the documents, and every result file is the
    one the same questions get over the same index with the documents table joined (as for an index without stores).
    """
    documents = corpus["root"] / "documents-read.parquet"
    shutil.copy2(corpus["paths"]["documents"], documents)
    index = corpus["root"] / "index-read"
    assert index_command.main(["--documents", str(documents), "--output", str(index), "--index-shards", "2"]) == 0
    flags = ["--questions", corpus["paths"]["retrieved_only"], "--documents", documents, "--index", index]
    flags += ["--model", tiny_bert_model, *FLAGS, "--engine", "in-process"]
    joined = corpus["root"] / "out-read-joined"
    with monkeypatch.context() as patched:  # the stores left unused: the documents table read and joined
        patched.setattr(driver, "given_store", lambda *args: False)
        patched.setattr(driver, "reads_store", lambda plan, *args: plan)
        assert run_job(*flags, "--output", joined) == 0
    assert json.loads((joined / "manifest.json").read_text())["documents_join"] == "broadcast"
    overwrite_pages(documents)
    with pytest.raises(OSError):  # ArrowInvalid is an OSError too
        pq.read_table(documents)
    read: list[str | None] = []  # the ids of the passages read from the stores; None where the results start
    take, write_results = PassageStore.take, driver.write_results
    monkeypatch.setattr(PassageStore, "take", lambda store, positions: record_ids(read, take(store, positions)))
    monkeypatch.setattr(driver, "write_results", lambda *args: read.append(None) or write_results(*args))
    output = corpus["root"] / "out-read"
    assert run_job(*flags, "--output", output) == 0
    retrieved = [row["retrieved_document_ids"] or [] for row in read_output(output, "questions")]
    assert sum(map(len, retrieved)) == 4 * TOP_K  # r05 finds none
    fetched, contexts = read[: read.index(None)], read[read.index(None) + 1 :]
    assert len(fetched) == len(set(fetched)) == 10  # 2 found twice
    assert set(fetched) == {hit for hits in retrieved for hit in hits}
    annotated = json.loads((output / "annotated.squad.json").read_text())
    titles = {article["title"] for article in annotated["data"]}
    assert len(contexts) == len(titles) > 0 and set(contexts) == titles
    assert "documents_join" not in json.loads((output / "manifest.json").read_text())
    assert_same_retrieved(output, job_output)
    assert_same_outputs(output, joined, ("questions", "answers"))
    for name in ("predictions.json", "na_probs.json", "annotated.squad.json", "label_studio.json"):
        assert json.loads((output / name).read_text()) == json.loads((joined / name).read_text()), name


def test_named_documents_are_read_from_the_stores_by_id(
    local_ray, corpus: dict, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    Questions retrieved for beside questions naming their `document_ids` (one of them a document without content
    and an id the documents lack): over an index with stores, the named documents are read from the stores by id,
    each once, and the documents table only for the rows of the ids the stores lack (read with their ids as a
    filter: the document without content); no documents table is joined, and every output is the joined run's.
    """
    root = corpus["root"] / "named"
    named = {"g01": ("What is returned?", ["d00", "d01"]),
             "g02": ("Which exception is raised?", ["d05", "no-content", "unknown"])}  # fmt: skip
    questions = {**{key: (query, None) for key, query in RETRIEVED.items()}, **named}
    paths = write_corpus(root, corpus["documents"], questions)
    index = root / "index"
    assert index_command.main(["--documents", paths["documents"], "--output", str(index), "--index-shards", "2"]) == 0
    flags = ["--questions", paths["questions"], "--documents", paths["documents"], "--index", index]
    flags += ["--model", tiny_bert_model, *FLAGS, "--engine", "in-process"]
    joined = root / "out-joined"
    with monkeypatch.context() as patched:  # the stores left unused: the documents table read and joined
        patched.setattr(driver, "given_store", lambda *args: False)
        patched.setattr(driver, "reads_store", lambda plan, *args: plan)
        assert run_job(*flags, "--output", joined) == 0
    assert json.loads((joined / "manifest.json").read_text())["documents_join"] == "broadcast"
    read: list[str | None] = []  # the ids of the documents read from the stores; None where the results start
    take, write_results = PassageStore.take, driver.write_results
    monkeypatch.setattr(PassageStore, "take", lambda store, positions: record_ids(read, take(store, positions)))
    monkeypatch.setattr(driver, "write_results", lambda *args: read.append(None) or write_results(*args))
    from_table: list[str] = []  # the ids of the documents table's rows read
    rows_with_ids = fetch.rows_with_ids
    monkeypatch.setattr(fetch, "rows_with_ids", lambda *args: record_rows(from_table, rows_with_ids(*args)))
    output = root / "out"
    assert run_job(*flags, "--output", output) == 0
    assert "documents_join" not in json.loads((output / "manifest.json").read_text())
    fetched = read[: read.index(None)]
    hits = {hit for row in read_output(output, "questions") for hit in row["retrieved_document_ids"] or []}
    assert len(fetched) == len(hits) + 3 and set(fetched) == hits | {"d00", "d01", "d05"}  # by position, by id
    assert from_table == ["no-content"]
    assert_same_outputs(output, joined, ("questions", "answers"))
    for name in ("predictions.json", "na_probs.json", "annotated.squad.json", "label_studio.json"):
        assert json.loads((output / name).read_text()) == json.loads((joined / name).read_text()), name
    errors = {row["question_id"]: row["error"] for row in read_output(output, "questions")}
    assert errors["g02"] == "unknown document ids: 'unknown' (the known documents were read)"


def record_rows(ids: list[str], rows: list[dict]) -> list[dict]:
    """`rows`, their ids added to `ids`."""
    ids.extend(row["id"] for row in rows)
    return rows


def test_rows_with_ids_reads_the_row_groups_that_hold_them(tmp_path: Path) -> None:
    """The documents table's rows with the ids asked for, across files and row groups, in table order; no others."""
    for part, first in ((0, 0), (1, 7)):
        table = pa.table({"id": [f"d{i}" for i in range(first, first + 7)], "content": [None, *"abcdef"],
                          "page_number": pa.array(range(7), pa.int32())})  # fmt: skip
        pq.write_table(table, tmp_path / f"part-{part}.parquet", row_group_size=3)
    rows = fetch.rows_with_ids(str(tmp_path), {"d0", "d8", "d13", "d99"})
    assert rows == [{"id": "d0", "content": None, "page_number": 0}, {"id": "d8", "content": "a", "page_number": 1},
                    {"id": "d13", "content": "f", "page_number": 6}]  # fmt: skip


@pytest.mark.parametrize("split", [[], ["--split-length", "12", "--split-overlap", "4"]], ids=["whole", "split"])
def test_the_stores_keep_the_documents_page_numbers_and_files(
    local_ray, corpus: dict, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch, split: list[str]
) -> None:
    """
    Documents with `page_number` and `file_path` (some null, form feeds in some texts): the stores of an index built
    by `jobs.index` (on Ray) and of one the job builds in this process keep them (split: the stores of the passages'
    source documents), and a job over either (on Ray, and in this process; then again, resumed over the index it
    saved) reads no row of the documents table (its pages overwritten once indexed), with the answers (their pages
    and files) and result files of the run that joins the documents table.
    """
    root = corpus["root"] / f"paged-{len(split)}"
    texts = {key: text for key, text in corpus["documents"].items() if text is not None}
    texts = {
        key: text[:150] + "\f" + text[150:] if index % 2 else text for index, (key, text) in enumerate(texts.items())
    }
    columns = {
        "id": list(texts),
        "content": list(texts.values()),
        "page_number": pa.array([None if index % 4 == 3 else index % 3 + 1 for index in range(len(texts))], pa.int32()),
        "file_path": [None if index % 3 == 1 else f"files/{key}.pdf" for index, key in enumerate(texts)],
    }
    documents = root / "documents.parquet"
    write_table(documents, columns)
    index = root / "index"
    build = ["--documents", str(documents), "--output", str(index), "--index-shards", "2", *split]
    assert index_command.main(build) == 0
    assert json.loads((index / "build.json").read_text())["store_document_columns"] == ["page_number", "file_path"]
    flags = ["--questions", corpus["paths"]["retrieved_only"], "--documents", documents]
    flags += ["--model", tiny_bert_model, *FLAGS, *split]
    in_process = ["--engine", "in-process"]
    joined = root / "out-joined"
    with monkeypatch.context() as patched:  # the stores left unused: the documents table read and joined
        patched.setattr(driver, "given_store", lambda *args: False)
        patched.setattr(driver, "reads_store", lambda plan, *args: plan)
        assert run_job(*flags, *in_process, "--index", index, "--output", joined) == 0
    answers = read_output(joined, "answers")
    spans = [row for row in answers if not row["is_no_answer"]]
    assert (
        {row["file_path"] is None for row in spans}
        == {row["answer_page_number"] is None for row in spans}
        == {
            True,
            False,
        }
    )  # some of the answers' documents have a file and a page, some have none
    built = root / "out-built"  # its own index, built in this process before the pages are overwritten
    assert run_job(*flags, *in_process, "--output", built, "--index-shards", "2") == 0
    overwrite_pages(documents)
    over_index = root / "out-index"
    assert run_job(*flags, "--engine", "ray", "--index", index, "--output", over_index) == 0
    resumed = run_job(
        *flags, *in_process, "--output", built, "--index-shards", "2"
    )  # the job again over the index it saved
    assert resumed == 0
    for output in (over_index, built):
        assert "documents_join" not in json.loads((output / "manifest.json").read_text())
        assert_same_outputs(output, joined, ("questions", "answers"))
        for name in ("predictions.json", "annotated.squad.json", "label_studio.json"):
            assert json.loads((output / name).read_text()) == json.loads((joined / name).read_text()), name


def record_ids(read: list[str | None], passages: pa.Table) -> pa.Table:
    """`passages`, their ids added to `read`."""
    read.extend(passages["id"].to_pylist())
    return passages


def overwrite_pages(path: Path) -> None:
    """Zeroes a Parquet file's pages, keeping its footer (its schema and row counts), size and modification time."""
    stat = path.stat()
    footer = int.from_bytes(path.read_bytes()[-8:-4], "little") + 8  # the footer, its length and the magic bytes
    with path.open("r+b") as file:
        file.seek(4)  # after the leading magic bytes
        file.write(bytes(stat.st_size - 4 - footer))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def assert_same_retrieved(output: Path, job_output: Path) -> None:
    """The run at `output` gave the retrieved questions the questions and answers rows of `job_output`'s run."""
    for table in ("questions", "answers"):
        expected = [row for row in read_output(job_output, table) if row["question_id"] in RETRIEVED]
        rows = read_output(output, table)
        assert len(rows) == len(expected) > 0
        for row, expected_row in zip(rows, expected, strict=True):
            assert row.keys() == expected_row.keys()
            for key, value in row.items():
                assert value == pytest.approx(expected_row[key], abs=1e-6), (table, row["question_id"], key)


def test_the_in_process_engine_retrieves_and_answers_as_the_ray_run(
    job_output: Path, corpus: dict, tiny_bert_model: Path
) -> None:
    """The same job in this process, without Ray, its index built in 3 shards (searched one after the other)."""
    output = corpus["root"] / "out-in-process"
    paths = corpus["paths"]
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--output", output,
        "--model", tiny_bert_model, *FLAGS, "--index-shards", "3", "--engine", "in-process",
    )  # fmt: skip
    assert status == 0
    assert_same_outputs(output, job_output, ("questions", "answers"))
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["cluster"]["engine"], manifest["index"]["shards"]) == ("in-process", 3)


# --- Ranking (--ranker) ----------------------------------------------------------------------------------------

RANKER_TOP_K = 2
RANKER_FLAGS = ["--ranker-top-k", str(RANKER_TOP_K), "--ranker-document-prefix", "passage: "]


@pytest.fixture(scope="module")
def ranked_output(local_ray, corpus: dict, tiny_bert_model: Path, minilm_cross_encoder: Path) -> Path:
    """One run on Ray that reranks BM25's hits with the local cross-encoder."""
    output = corpus["root"] / "out-ranked"
    paths = corpus["paths"]
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--output", output,
        "--model", tiny_bert_model, *FLAGS, "--ranker", minilm_cross_encoder, *RANKER_FLAGS,
    )  # fmt: skip
    assert status == 0
    return output


def test_ranked_documents_are_those_of_haystacks_retriever_then_ranker(
    ranked_output: Path, haystack_hits: dict, minilm_cross_encoder: Path
) -> None:
    """
    InMemoryBM25Retriever -> SentenceTransformersSimilarityRanker: the same documents kept, in its order, with its
    scores (1e-5) and their BM25 scores; questions that name their documents are read as named, unranked.
    """
    haystack = SentenceTransformersSimilarityRanker(
        model=str(minilm_cross_encoder), device=None, top_k=RANKER_TOP_K, document_prefix="passage: "
    )
    haystack.warm_up()
    questions = {row["question_id"]: row for row in read_output(ranked_output, "questions")}
    for key, hits in haystack_hits.items():
        ranked = haystack.run(query=RETRIEVED[key], documents=hits)["documents"]
        row = questions[key]
        assert row["retrieved_document_ids"] == [doc.id for doc in ranked], key
        assert row["ranker_scores"] == pytest.approx([doc.score for doc in ranked], abs=1e-5), key
        bm25 = {hit.id: hit.score for hit in hits}
        assert row["retrieval_scores"] == pytest.approx([bm25[doc.id] for doc in ranked], rel=1e-6), key
        assert row["n_documents"] == len(ranked)
    assert len(questions["r01"]["retrieved_document_ids"]) == RANKER_TOP_K and questions["r05"]["ranker_scores"] == []
    assert questions["g01"]["n_documents"] == 2 and questions["g01"]["ranker_scores"] is None
    manifest = json.loads((ranked_output / "manifest.json").read_text())
    assert manifest["config"]["ranker"] == str(minilm_cross_encoder)


def test_the_in_process_ranker_equals_the_ray_stage(
    ranked_output: Path, corpus: dict, tiny_bert_model: Path, minilm_cross_encoder: Path
) -> None:
    output = corpus["root"] / "out-ranked-in-process"
    paths = corpus["paths"]
    status = run_job(
        "--questions", paths["questions"], "--documents", paths["documents"], "--output", output,
        "--model", tiny_bert_model, *FLAGS, "--ranker", minilm_cross_encoder, *RANKER_FLAGS, "--engine", "in-process",
    )  # fmt: skip
    assert status == 0
    assert_same_outputs(output, ranked_output, ("questions", "answers"))


def test_sharded_retrieval_stages_equal_one_index(tmp_path: Path) -> None:
    """The chained shard stages give the hits, order and scores of one index, ties and short lists included."""
    texts = [TEXTS[i % 7][:200] for i in range(40)] + ["tie tie", "tie tie", "lonely word"]  # repeats: ties
    ids = [f"p{i:02d}" for i in range(len(texts))]
    queries = ["What does it return?", "tie", "lonely", "zzzqqq", "the module", "   "]
    batch = pa.table({"id": [f"q{i}" for i in range(len(queries))], "query": queries})
    results = []
    for n_shards in (1, 3):
        settings = RetrievalSettings(index_shards=n_shards)
        location = str(tmp_path / f"index{n_shards}")
        write_index(build_index_from(tmp_path / f"docs{n_shards}.parquet", ids, texts, settings), location)
        locations = shard_locations(location, n_shards)
        # a stage per shard; then (3 shards) a stage of one and a stage of two, as `shard_stages` splits them
        for stages in {len(locations): [[shard] for shard in locations], 2: shard_stages(locations, 2)}.values():
            rows = batch
            for stage in stages:
                rows = RetrieveDocuments(stage, retriever_top_k=5)(rows)
            results.append(rows.drop_columns(["retrieved_positions"]).to_pylist())
    assert shard_stages(["a", "b", "c"], 2) == [["a"], ["b", "c"]]
    assert all(result == results[0] for result in results[1:])
    by_query = {row["query"]: row for row in results[0]}
    assert by_query["tie"]["document_ids"][:2] == ["p40", "p41"]  # equal scores: corpus order
    assert by_query["zzzqqq"]["document_ids"] == [] and by_query["   "]["document_ids"] is None


def build_index_from(path: Path, ids: list[str], texts: list[str], settings: RetrievalSettings):
    write_table(path, {"id": ids, "content": texts})
    return build_index(settings, str(path))


# --- Bad input: exit 2 before Ray starts ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_ray_for_bad_input(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bad-input tests fail if the bulk job gets as far as starting Ray (`jobs.index` starts it as it must)."""
    if "capsys" in request.fixturenames:
        start_engine = driver.start_engine

        def start_no_ray(run: RunSettings, engine: Engine, ray_logs: RayLogFilter, *args: Any, **kwargs: Any) -> dict:
            if isinstance(engine, RayEngine):
                raise AssertionError("the job started Ray for unusable input")
            return start_engine(run, engine, ray_logs, *args, **kwargs)

        monkeypatch.setattr(driver, "start_engine", start_no_ray)


def fails_before_ray(capsys: pytest.CaptureFixture, output: Path, *args) -> str:
    """Runs the job, checks exit status 2 with one error message and no output; returns the message."""
    status = main([str(arg) for arg in args] + ["--output", str(output)])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert captured.err.startswith("bulk-qa: error: ") and "Traceback" not in captured.err, captured.err
    assert not output.exists()
    return captured.err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--retriever-top-k", "0"], "retriever_top_k must be >= 1, not 0"),
        (["--index-shards", "0"], "index_shards must be >= 1, not 0"),
        (["--bm25-algorithm", "BM26"], "bm25_algorithm must be one of BM25Okapi, BM25L, BM25Plus, Lucene, not 'BM26'"),
        (["--bm25-parameters", "{k3: 1}"], "bm25_parameters ['k3'] do not apply to BM25L, which takes k1, b, delta"),
        (["--bm25-parameters", "{b: 2}"], "bm25_parameters['b'] must be between 0 and 1, not 2"),
        (["--bm25-parameters", "[1]"], "bm25_parameters must be a mapping, not list"),
    ],
)
def test_retrieval_option_errors(capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, flags, message) -> None:
    paths = corpus["paths"]
    error = fails_before_ray(capsys, tmp_path / "out", "--questions", paths["questions"], "--documents",
                             paths["documents"], *flags)  # fmt: skip
    assert message in error


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ranker-top-k", "0"], "ranker_top_k must be >= 1, not 0"),
        (["--ranker-calibration-factor", "0"], "ranker_calibration_factor must be > 0, not 0.0"),
        (["--ranker-precision", "fp8"], "ranker_precision must be one of fp32, bf16, auto, not 'fp8'"),
        (
            ["--ranker-meta-fields-to-embed", "[year, file_path]"],
            "ranker_meta_fields_to_embed: the documents' metadata the ranker can embed is page_number, file_path, "
            "not year",
        ),
        (["--ranker", "/no/such/ranker"], "--ranker /no/such/ranker: the folder does not exist."),
        (["--ranker", "{reader}"], "a ranking cross-encoder is a sequence-classification model with 1 label, not"),
    ],
)
def test_ranker_option_errors(
    capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, tiny_bert_model: Path, flags, message
) -> None:
    """A bad ranker option or model: one line, exit 2, before Ray (the reader's folder is no cross-encoder)."""
    paths = corpus["paths"]
    flags = [flag.format(reader=tiny_bert_model) for flag in flags]
    error = fails_before_ray(capsys, tmp_path / "out", "--questions", paths["questions"], "--documents",
                             paths["documents"], "--model", tiny_bert_model, *flags)  # fmt: skip
    assert message in error, error


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        ([None, None], "cannot build the BM25 index of the documents: Cannot build a BM25 index from an empty corpus"),
        (["!!! ...", "-- ?"], "cannot build the BM25 index of the documents: The corpus of 2 documents has no terms"),
    ],
)
def test_unindexable_corpus(
    capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, tiny_bert_model: Path, contents, message
) -> None:
    documents = write_table(
        tmp_path / "documents.parquet", {"id": ["a", "b"], "content": pa.array(contents, pa.string())}
    )
    # The in-process engine builds in memory before Ray would start; the Ray build says the same once Ray runs
    # (tests/jobs/indexing/test_bm25_build.py).
    flags = ["--model", tiny_bert_model, "--engine", "in-process"]
    error = fails_before_ray(capsys, tmp_path / "out", "--questions", corpus["paths"]["retrieved_only"],
                             "--documents", documents, *flags)  # fmt: skip
    assert f"{documents}: {message}" in error


def test_index_from_other_documents_or_settings_is_refused(
    local_ray, capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict, tiny_bert_model: Path
) -> None:
    other = write_table(tmp_path / "other.parquet", {"id": ["x", "y"], "content": ["one text", "another text"]})
    index = tmp_path / "index"
    assert index_command.main(["--documents", other, "--output", str(index)]) == 0
    args = ["--questions", corpus["paths"]["retrieved_only"], "--documents", corpus["paths"]["documents"]]
    error = fails_before_ray(capsys, tmp_path / "out", *args, "--index", index, "--model", tiny_bert_model)
    assert f"--index {index} was built from other documents than --documents {corpus['paths']['documents']}" in error
    # The same documents, copied (other files): accepted by fingerprint, so only the settings differ below.
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(Path(other).read_bytes())
    args = ["--questions", corpus["paths"]["retrieved_only"], "--documents", copy, "--index", index]
    error = fails_before_ray(
        capsys, tmp_path / "out", *args, "--bm25-algorithm", "BM25Okapi", "--model", tiny_bert_model
    )
    assert f"--index {index} was built with BM25L" in error and "not this run's bm25_algorithm BM25Okapi" in error
    header = json.loads((index / "index.json").read_text())
    (index / "index.json").write_text(json.dumps({**header, "tokenization_regex": r"\w+"}))
    error = fails_before_ray(capsys, tmp_path / "out", *args, "--model", tiny_bert_model)
    assert f"--index {index} was built with the tokenization regex '\\\\w+', not this version's" in error
    error = fails_before_ray(capsys, tmp_path / "out", *args[:-2], "--index", tmp_path, "--model", tiny_bert_model)
    assert f"--index {tmp_path}: not a complete index folder" in error


def test_questions_without_document_ids_need_documents(capsys: pytest.CaptureFixture, tmp_path: Path, corpus) -> None:
    error = fails_before_ray(capsys, tmp_path / "out", "--questions", corpus["paths"]["retrieved_only"])
    assert (
        "needs a 'document_ids' column (list of document ids) or a SQuAD-style 'context' column, or --documents"
        in error
    )


def test_index_command_refuses_bad_options_and_foreign_folders(
    local_ray, capsys: pytest.CaptureFixture, tmp_path: Path, corpus: dict
) -> None:
    documents = corpus["paths"]["documents"]
    assert index_command.main(["--documents", documents, "--output", str(tmp_path / "i"), "--bm25-algorithm", "X"]) == 2
    assert "bm25_algorithm must be one of" in capsys.readouterr().err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert index_command.main(["--documents", documents, "--output", str(tmp_path / "busy")]) == 2
    assert "holds files but no index" in capsys.readouterr().err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    sharded = ["--documents", documents, "--output", str(tmp_path / "sharded"), "--index-shards", "2"]
    assert index_command.main(sharded) == 0
    assert index_command.main(sharded) == 0  # an index there, sharded or not, is replaced
    names = sorted(path.name for path in (tmp_path / "sharded").iterdir())
    assert names == ["build.json", "doc_frequencies.npy", "shard-00000", "shard-00001", "statistics.json"]
