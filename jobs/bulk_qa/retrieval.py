"""
Retrieval, driver side: which questions need it, the BM25 index of the run (built once, or loaded from `--index`,
or kept from the run this one resumes), and the wave stage that hands it to a pool of retrieval actors.

An index folder is `qa_core.retrieval.BM25Index.save`'s (`.npy` arrays, Arrow and JSON files, never unpickled), or with
more than one shard one such folder per shard (`shard-00000/`, ...: contiguous ranges of `shard_size` corpus
positions weighed with the whole corpus's statistics), plus `build.json`, written last: what it was built from
(the documents' files and fingerprint) and how (algorithm, parameters, shards and their size, vocabulary size,
build seconds, splitting). A run saves its index as `_index/` in its output folder, so that a resumed run does
not rebuild it; the retrieval actors memory-map it from there. Each shard folder holds its documents' ids and
texts, and their `page_number` and `file_path` where they have them (`store.arrow`, `qa_core.retrieval.store`;
`build.json` names those kept in `store_document_columns`); with `split_length` the index holds passages of the
documents, and each shard folder holds where each passage lies in its source document and those documents in a
store of their own instead (`jobs.passages`). A run over the index reads its hits, and the documents its
questions name, from there (`reads_store`) instead of reading and joining the documents table.

With the Ray engine (and in `python -m jobs.index`) the index is built by Ray Data (`build_index_with_ray`,
`jobs.indexing`): the driver holds the corpus statistics only; each shard is tokenized once by a task that
writes its term counts, then weighed from them and written by another. The
in-process engine, chosen for small local jobs, builds the same index in its own process (`build_index`).

For dense and hybrid retrieval the index folder also holds the passages' vectors (`dense/`, embedded by
`jobs.indexing.embed`'s actor pool once the BM25 index is saved) and `build.json` a `dense` section; the
retrieval stage then ends with `workers.retrieve_dense.RetrieveDense`.
"""

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from jobs.bulk_qa.inputs import input_fingerprint
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.workers.fetch import fetch_passages
from jobs.bulk_qa.workers.retrieve import RetrieveDocuments
from jobs.bulk_qa.workers.retrieve_dense import RetrieveDense
from jobs.bulk_qa.workers.rows import wave_questions
from jobs.engines import Engine, InProcessEngine
from jobs.in_process import InProcessDataset
from jobs.indexing.bm25 import (
    CountedPassages,
    check_unique_ids,
    count_shards,
    save_files,
    shard_id_hashes,
    weigh_shards,
)
from jobs.indexing.memory import bounded, memory_budget
from jobs.indexing.passages import passage_shards
from jobs.passages import Passages, check_source_ids, save_split, split_batch, split_window
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, parquet_dataset, redact, resolve_path
from qa_core.retrieval.dense import DENSE_HEADER_FILE
from qa_core.retrieval.dense import FORMAT as DENSE_FORMAT
from qa_core.retrieval.fingerprint import fingerprint_hex, fingerprint_value
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.index_io import HEADER_FILE
from qa_core.retrieval.sharding import build_shards, shard_bounds
from qa_core.retrieval.statistics import FREQUENCIES_FILE, STATISTICS_FILE, CorpusStatistics
from qa_core.retrieval.store import STORED_DOCUMENT_FIELDS, write_store
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX

INDEX_FOLDER = "_index"  # the run's index, inside its output folder
BUILD_FILE = "build.json"  # written last into an index folder: a folder without it is incomplete
# Questions one retrieval call searches for (one `BM25Index.search` call).
QUESTIONS_PER_RETRIEVAL_BATCH = 256
# BM25 retrieval stages chained per CPU of the cluster (`shard_stages`): each stage searches its shards one after
# the other; more stages than CPUs add hand-overs between actors (Arrow tables through the object store) without
# more cores to run them.
BM25_STAGES_PER_CPU = 1
# The CPUs a retrieval actor reserves at most (less on a small cluster, so that tasks always find some)
RETRIEVAL_ACTOR_MAX_CPUS = 0.5
# The documents' columns that passage stores keep besides ids and texts, where the documents have them; and the
# key of `build.json` that names those an index's stores keep.
STORED_COLUMNS = [field.name for field in STORED_DOCUMENT_FIELDS]
STORE_COLUMNS_KEY = "store_document_columns"
# Documents read per batch when building the index or fingerprinting the corpus.
_DOCUMENTS_PER_READ = 65536


@dataclass(frozen=True)
class BuiltIndex:
    """
    An index built in memory, not saved yet.

    :param shards: The shards, in corpus order.
    :param record: The build record (`build.json`).
    :param store: The shards' passage stores' columns (`id`, `content` and the documents' stored columns), in
        corpus order: the documents', or with `split_length` their source documents'.
    :param passages: With `split_length`, where the indexed passages lie in their documents (`passage_columns`,
        `source` a row of `store`), in corpus order.
    """

    shards: list[BM25Index]
    record: dict[str, Any]
    store: pa.Table
    passages: pa.Table | None = None


@dataclass(frozen=True)
class IndexPlan:
    """
    The run's index: where the retrieval actors load it from and what the manifest says of it.

    :param location: The index folder (local path or URI).
    :param record: Documents, vocabulary size, build seconds, algorithm, parameters, splitting, fingerprint, and
        `source`: `built` (by this run), `resumed` (kept from the run this one resumes) or `given` (`--index`).
    :param built: An index this run built in memory, not saved yet (`complete_index` saves and drops it).
    :param pending: The index is still to be built by Ray into `location` (`complete_index` builds it).
    :param store: The run reads its documents from the index's stores (`reads_store`), and joins no documents table.
    :param documents: With `store`, the documents table: read only for the named ids that the stores lack.
    """

    location: str
    record: dict[str, Any]
    built: BuiltIndex | None = None
    pending: bool = False
    store: bool = False
    documents: str | None = None

    @property
    def shard_locations(self) -> list[str]:
        """The folder of each shard, in corpus order (the index folder itself when it has one shard)."""
        return shard_locations(self.location, self.record.get("shards", 1))


def shard_locations(location: str, shards: int) -> list[str]:
    """The shard folders of an index folder with `shards` shards."""
    if shards == 1:
        return [location]
    return [f"{location.rstrip('/')}/shard-{shard:05d}" for shard in range(shards)]


def needs_retrieval(questions_path: str, schema: pa.Schema) -> bool:
    """
    Whether any question lacks `document_ids`: the table has no such column (and no SQuAD `context`), or some
    rows hold null. Reads only the `document_ids` column.
    """
    if "document_ids" not in schema.names:
        return "context" not in schema.names
    return parquet_dataset(questions_path).count_rows(filter=pc.field("document_ids").is_null()) > 0


def reads_store(plan: IndexPlan, documents_path: str, documents: pa.Schema) -> IndexPlan:
    """
    The plan, reading the documents it hands the reader from the index's stores (`workers.fetch`) where it can: an
    index whose shards keep stores (or that this run builds, which writes them), and the documents' `page_number`
    and `file_path` kept in the stores where the documents have them (an index built before they were kept has ids
    and texts only). Then the retrieved passages are read from the stores by position, and the documents that
    questions name in `document_ids` by id: the documents table (`documents_path`) is read only for named ids that
    the stores lack (documents without content, or split into no passage). Else the documents table is joined.
    """
    built = plan.pending or plan.built is not None  # built by this run: its stores keep all the columns
    stored = plan.pending or plan.record.get("store", False)
    kept = STORED_COLUMNS if built else plan.record.get(STORE_COLUMNS_KEY, [])
    serves = stored and _store_serves(documents, kept)
    return replace(plan, store=serves, documents=documents_path if serves else None)


def given_store(settings: RetrievalSettings, documents_path: str, location: str | None = None) -> bool:
    """
    Whether a run given `--index` (or the index folder at `location`: the one a resumed run saved) will read its
    documents from the index's stores (`reads_store`), from the index's `build.json` before it is checked: then
    the run joins no documents table, whatever its size.
    """
    location = location or settings.index
    record = _read_json(location, BUILD_FILE) if location is not None else None
    if not isinstance(record, dict) or not record.get("store"):
        return False
    return _store_serves(parquet_dataset(documents_path).schema, record.get(STORE_COLUMNS_KEY, []))


def _store_serves(documents: pa.Schema, kept: list[str]) -> bool:
    """Whether stores that keep the documents' columns `kept` serve the run: each of `STORED_COLUMNS` it has kept."""
    return not set(STORED_COLUMNS) & set(documents.names) - set(kept)


def prepare_index(
    settings: RetrievalSettings, documents: str, output: OutputFolder, resuming: bool, distributed: bool
) -> IndexPlan:
    """
    The run's index, before Ray starts: `--index` checked against the documents, or the index of the run this
    one resumes, or a new one: with `distributed` (the Ray engine) left for `complete_index` to build by Ray,
    else built in memory now (saved by `complete_index` once the output folder is claimed).

    :raises InputError: For an `--index` built from other documents or with other settings, or documents that
        cannot be indexed (none with content, no terms, bad ids), naming the option or file.
    """
    if settings.index is not None:
        return IndexPlan(settings.index, {**check_given_index(settings, documents), "source": "given"})
    saved = saved_index(output)
    if resuming:
        record = _read_json(saved, BUILD_FILE)
        if isinstance(record, dict) and not _earlier_split(record):  # else built again, as this version builds it
            return IndexPlan(saved, {**_summary(record), "source": "resumed"})
    if distributed:
        return IndexPlan(saved, {"source": "built"}, pending=True)
    built = build_index(settings, documents)
    return IndexPlan(saved, {**_summary(built.record), "source": "built"}, built=built)


def saved_index(output: OutputFolder) -> str:
    """Where a run saves the index it builds: `INDEX_FOLDER` in its output folder."""
    return f"{output.uri.rstrip('/')}/{INDEX_FOLDER}"


def complete_index(
    plan: IndexPlan, settings: RetrievalSettings, documents: str, engine: Engine, cluster: dict[str, Any]
) -> IndexPlan:
    """
    Once the output folder is claimed: saves an index the run built in memory into it (`plan.location`) and drops
    it from the driver, or builds a pending one there by Ray (`build_index_with_ray`); for dense or hybrid
    retrieval, embeds its passages there too (`jobs.indexing.embed`) unless the index holds their vectors by the
    run's embedding model (kept from the run this one resumes), and builds its approximate index where one is asked
    for or recorded but missing (`jobs.indexing.ann.needs_graph`; not into a given `--index`).

    :raises InputError: If the documents cannot be indexed.
    """
    if plan.built is not None:
        write_index(plan.built, plan.location)
        plan = replace(plan, built=None)
    if plan.pending:
        record = build_index_with_ray(settings, documents, plan.location)
        plan = replace(plan, record={**_summary(record), "source": "built"}, pending=False)
    if not settings.dense:
        return plan
    from jobs.indexing.ann import needs_graph

    dense = plan.record.get("dense", {})
    if dense.get("fingerprint") != _fingerprint(settings) or _dense_format(plan.location, dense) != DENSE_FORMAT:
        dense = add_dense_index(plan.location, settings, documents, engine, cluster)
    elif plan.record.get("source") != "given" and needs_graph(plan.location, dense, settings):
        dense = add_graph(plan.location, dense, settings, engine)
    return replace(plan, record={**plan.record, "dense": dense})


def add_dense_index(
    location: str, settings: RetrievalSettings, documents: str, engine: Engine, cluster: dict[str, Any]
) -> dict[str, Any]:
    """
    Embeds the passages of the complete BM25 index at `location` into its `dense/` shards and adds the `dense`
    section to its `build.json`, then, with `ann`, builds its approximate index and records it there too (`add_graph`):
    a build stopped in between leaves the vectors recorded and the approximate index to build.

    :returns: The `dense` section.
    """
    from jobs.indexing.embed import embed_index

    record = _read_json(location, BUILD_FILE)
    dense = embed_index(
        _passages_dataset(documents, settings, engine), settings, location, record["documents"], engine, cluster
    )
    _write_dense(location, dense)
    return add_graph(location, dense, settings, engine) if settings.ann is not None else dense


def add_graph(location: str, dense: dict[str, Any], settings: RetrievalSettings, engine: Engine) -> dict[str, Any]:
    """
    Builds the approximate index of the dense shards at `location` (`jobs.indexing.ann.build_ann`) where the engine runs
    work on a node (a Ray task holding a node's CPUs, or this process) and records it in `build.json`.

    :returns: The `dense` section with its `ann`.
    :raises InputError: Without FAISS, saying how to install it, or with too few passages for the kind.
    """
    from jobs.indexing.ann import build_ann
    from qa_core.retrieval.ann import check_size, require_faiss

    kind = settings.ann or dense["ann"]["kind"]  # asked for, or the recorded one whose file is missing
    try:
        require_faiss()
        check_size(kind, sum(shard["n"] for shard in dense["shards"]))
    except (ImportError, ValueError) as error:
        raise InputError(str(error)) from None
    dense = {**dense, "ann": engine.run_on_a_node(build_ann, location, dense, kind, settings.ann_search())}
    _write_dense(location, dense)
    return dense


def _write_dense(location: str, dense: dict[str, Any]) -> None:
    """Writes `dense` as the `dense` section of the `build.json` at `location`."""
    record = _read_json(location, BUILD_FILE)
    filesystem, inner = resolve_path(location)
    with filesystem.open_output_stream(f"{inner.rstrip('/')}/{BUILD_FILE}") as stream:
        stream.write(json.dumps({**record, "dense": dense}, indent=2, sort_keys=True).encode("utf-8"))


def _fingerprint(settings: RetrievalSettings) -> str:
    """The embedding model's fingerprint."""
    from qa_core.embedding import embedding_fingerprint

    return embedding_fingerprint(settings.embedding_model)


def _passages_dataset(documents: str, settings: RetrievalSettings, engine: Engine) -> Any:
    """The index's passages as the engine's dataset: `jobs.indexing.passages.indexed_passages` on Ray."""
    if isinstance(engine, InProcessEngine):
        return InProcessDataset(lambda: list(passage_tables(documents, settings)))
    from jobs.indexing.passages import indexed_passages

    return indexed_passages(documents, settings)


def passage_tables(documents: str, settings: RetrievalSettings) -> Iterator[pa.Table]:
    """What the index holds (`_indexed_texts`), read in the driver as tables of `position`, `id` and `content`."""
    position = 0
    for ids, texts, _ in _indexed_texts(documents, settings):
        yield pa.table({"position": pa.array(range(position, position + len(ids)), pa.int64()), "id": ids,
                        "content": texts})  # fmt: skip
        position += len(ids)


def build_index(settings: RetrievalSettings, documents: str) -> BuiltIndex:
    """
    Builds the BM25 index of the documents that have content, in table order (documents without content are
    never retrieved and do not count in the corpus statistics, as in Haystack), or with `settings.split_length`
    of their passages, in shards of `settings.shard_size` passages, in this process (tokenizing once): for
    corpora that fit in its memory (the in-process engine's). `build_index_with_ray` builds the same index, bit
    for bit, by Ray Data.

    :returns: The shards, the build record, the documents (the shards' stores) and where the passages lie.
    :raises InputError: If the documents cannot be indexed, naming the documents file.
    """
    started = time.time()
    budget = _budget(settings)
    settings = bounded(settings, 1)  # one process builds the whole corpus
    ids: list[str] = []
    texts: list[str] = []
    passages: list[pa.Table] = []  # split: where each passage lies, `source` counted over all the documents
    stored: list[pa.RecordBatch] = []  # the documents: the shards' passage (or source) stores
    for batch in _document_batches(documents, stored=True):
        batch_ids, batch_texts, batch_passages = _indexed_batch(batch, settings)
        ids += batch_ids
        texts += batch_texts
        if batch_passages is not None:
            first = sum(map(len, stored))
            passages.append(batch_passages.set_column(0, "source", pc.add(batch_passages["source"], first)))
        stored.append(batch)
    _check_shards(settings, len(texts))
    size = settings.shard_size(len(texts))
    bounds = [*range(0, len(texts), size), len(texts)]
    where = pa.concat_tables(passages) if settings.split_length is not None else None
    source_ids = None  # split: each source document's id, as the stores find it
    try:
        shards, statistics = build_shards(ids, texts, bounds, settings.bm25_algorithm, settings.parameters())
        store = pa.Table.from_batches(stored)  # not empty: `build_shards` refuses a corpus without passages
        if where is not None:
            source_ids = store["id"].take(pc.unique(where["source"]))
            check_source_ids(source_ids)
    except ValueError as error:
        raise InputError(f"{redact(documents)}: cannot build the BM25 index of the documents: {error}") from None
    n_sources = None if source_ids is None else len(source_ids)
    corpus = (statistics.n_docs, len(statistics.vocabulary), statistics.fingerprint_hex)
    record = _build_record(settings, documents, corpus, (len(shards), size, budget), n_sources, started)
    return BuiltIndex(shards, record, store, where)


def build_index_with_ray(settings: RetrievalSettings, documents: str, location: str) -> dict[str, Any]:
    """
    Builds the index `build_index` builds, the same bit for bit, by Ray Data (`jobs.indexing.bm25`): the
    documents read and split by tasks, each shard tokenized once by a task that writes its term counts and
    returns its statistics, the statistics merged in the driver (which holds only them), then each shard weighed
    from its counts by a task and written into `location`; `build.json` last. A local folder appears complete or
    not at all (written beside it, then renamed). Needs a running Ray.

    :returns: The build record.
    :raises InputError: If the documents cannot be indexed (no terms, ids invalid or not unique), naming the
        documents file.
    """
    started = time.time()
    budget = _budget(settings)
    settings = bounded(settings, _node_cpus())
    passages, n_docs = passage_shards(documents, settings, cpus=_cluster_cpus())
    _check_shards(settings, n_docs)
    size = settings.shard_size(n_docs)
    n_shards = len(range(0, n_docs, size))
    filesystem, inner = resolve_path(location)
    local = isinstance(filesystem, pafs.LocalFileSystem)
    folder = str(Path(inner).with_name(f".{Path(inner).name}.{uuid.uuid4().hex}")) if local else location
    if not local and filesystem.get_file_info(inner).type != pafs.FileType.NotFound:
        filesystem.delete_dir(inner)
    locations = shard_locations(folder, n_shards)
    try:
        problem = f"{redact(documents)}: cannot build the BM25 index of the documents"
        counted = _count_shards(passages, locations, settings, problem)
        statistics = counted.statistics
        weigh_shards(list(zip(locations, range(0, n_docs, size), counted.fingerprints, counted.parts, strict=True)),
                     statistics, settings)  # fmt: skip
        save_files(folder, statistics.save)  # what `add_documents_with_ray` grows the index from
    except BaseException:
        if local:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    corpus = (statistics.n_docs, len(statistics.vocabulary), statistics.fingerprint_hex)
    record = _build_record(settings, documents, corpus, (n_shards, size, budget), counted.sources, started)
    if local:
        (Path(folder) / BUILD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
        if Path(inner).exists():
            shutil.rmtree(inner)
        Path(folder).rename(inner)
    else:
        with filesystem.open_output_stream(f"{inner.rstrip('/')}/{BUILD_FILE}") as stream:
            stream.write(json.dumps(record, indent=2, sort_keys=True).encode("utf-8"))
    return record


def _count_shards(
    passages: Any,
    locations: list[str],
    settings: RetrievalSettings,
    problem: str,
    old_shards: list[tuple[str, int]] = (),
) -> CountedPassages:
    """
    `count_shards` of passages into `locations`, then the corpus's checks: it has terms, and no id twice among
    these passages and the documents of an index's `old_shards` (folder, offset).

    :raises InputError: `problem`, then what is wrong.
    """
    try:
        counted = count_shards(passages, locations, settings.split_length is not None)
        counted.statistics.check(DEFAULT_TOKENIZATION_REGEX)
        hashes = np.concatenate([*(shard_id_hashes(location) for location, _ in old_shards), counted.id_hashes])
        folders = [*old_shards, *counted.folders]
        check_unique_ids(hashes, [folder for folder, _ in folders], [offset for _, offset in folders])
        if counted.source_ids is not None:  # split: each source document's id found by id in the stores
            old = [Passages.load(Path(location)).own_source_ids() for location, _ in old_shards]
            check_source_ids(pa.chunked_array([*old, *counted.source_ids.chunks], pa.string()))
    except ValueError as error:
        raise InputError(f"{problem}: {error}") from None
    return counted


def _cluster_cpus() -> int:
    """The CPUs of the running Ray cluster (at least 1)."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _node_cpus() -> int:
    """The CPUs of the running Ray cluster's largest node (at least 1): the build tasks a node runs at once."""
    import ray

    return max([1, *(int(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node["Alive"])])


def _budget(settings: RetrievalSettings) -> int | None:
    """The bytes of memory the build's shard size is chosen for; None where a shard setting is given."""
    return memory_budget(settings.memory_budget) if settings.sized_by_memory else None


def add_documents_with_ray(location: str, documents: str, budget_gib: float | None = None) -> dict[str, Any]:
    """
    Grows a local index folder built by `build_index_with_ray` with more documents, by Ray Data, without reading
    its documents again: the added documents (split as the index's were) are counted as new shards after the old
    ones (of the index's shard size) and their statistics merged into the stored ones, then every shard is
    weighed from its stored term counts (the old ones without tokenizing, writing their weights only:
    `sharding.weigh_counted_shard`). The result is bit for bit the index
    of the old documents followed by the new ones built at once, shards aside (the old last shard may hold fewer
    passages). The new shards hold the index's shard size, or fewer where the memory budget (`budget_gib` GiB,
    or `jobs.indexing.memory`'s share of the node's memory) bounds them to fewer. Until the added documents are
    counted and checked the index is untouched; then `build.json` is removed, and written last: an addition
    interrupted after that leaves an incomplete folder.

    :returns: The new build record (its `documents_files` lists both builds' files).
    :raises InputError: If the folder is not such an index (or holds vectors too), or the documents cannot be
        indexed (no terms, ids invalid, or an id that the index and the documents hold twice in all).
    """
    started = time.time()
    filesystem, inner = resolve_path(location)
    folder = Path(inner)
    record = _read_json(location, BUILD_FILE)
    if not isinstance(filesystem, pafs.LocalFileSystem) or not isinstance(record, dict):
        raise InputError(f"--index {redact(location)}: not a complete local index folder (no {BUILD_FILE}).")
    if "dense" in record:
        raise InputError(
            f"--index {redact(location)}: it holds the passages' vectors too (dense retrieval); --add grows a BM25 "
            "index only: build the dense or hybrid index again with --documents and --output."
        )
    _check_split_layout(location, record)
    try:
        before = CorpusStatistics.load(folder)
    except ValueError as error:
        raise InputError(
            f"--index {redact(location)}: it keeps no corpus statistics to grow from (built by the in-process "
            f"engine or an earlier version): rebuild it with `python -m jobs.index`. {error}"
        ) from None
    budget = RetrievalSettings(memory_budget=budget_gib)
    size = min(record["shard_size"], bounded(budget, _node_cpus()).index_shard_size)
    settings = RetrievalSettings(
        bm25_algorithm=record["algorithm"], bm25_parameters=record["parameters"], index_shard_size=size,
        split_length=record.get("split_length"), split_overlap=record.get("split_overlap", 0),
    )  # fmt: skip
    old_shards = record["shards"]
    headers = {shard: _read_json(shard, HEADER_FILE) for shard in shard_locations(str(folder), old_shards)}
    passages, n_added = passage_shards(documents, settings, first_position=before.n_docs, cpus=_cluster_cpus())
    locations = shard_locations(str(folder), old_shards + len(range(0, n_added, size)))
    old = [(shard, header["doc_offset"]) for shard, header in headers.items()]
    try:
        added = _count_shards(passages, locations[old_shards:], settings,
                              f"{redact(documents)}: cannot add the documents to the index", old)  # fmt: skip
    except BaseException:
        for shard in locations[old_shards:]:
            shutil.rmtree(shard, ignore_errors=True)
        raise
    statistics = CorpusStatistics.merge([before, added.statistics])
    (folder / BUILD_FILE).unlink()  # incomplete until the new record is written
    if old_shards == 1:  # a one-shard index keeps its files at the top: into shard-00000/ beside the new shards
        Path(locations[0]).mkdir()
        for path in list(folder.iterdir()):
            if path.is_file() and path.name not in (STATISTICS_FILE, FREQUENCIES_FILE):
                path.rename(Path(locations[0]) / path.name)
    # The added shards first: theirs are the longer tasks (their terms put in order, all their files written).
    shards = list(zip(locations[old_shards:], range(before.n_docs, statistics.n_docs, size), added.fingerprints,
                      added.parts, strict=True))  # fmt: skip
    shards += [(location, header["doc_offset"], header["fingerprint"], 1)
               for location, header in zip(locations, headers.values(), strict=False)]  # fmt: skip
    weigh_shards(shards, statistics, settings)
    statistics.save(folder)
    corpus = (statistics.n_docs, len(statistics.vocabulary), statistics.fingerprint_hex)
    grown = _build_record(settings, documents, corpus, (len(locations), size, _budget(budget)), None, started)
    grown["documents_files"] = [record["documents_files"], grown["documents_files"]]
    if settings.split_length is not None:
        grown["source_documents"] = record["source_documents"] + added.sources
    grown["store"] = grown["store"] and record.get("store", False)  # an older index's shards have none
    old_columns = record.get(STORE_COLUMNS_KEY, [])  # the columns every shard's store keeps
    grown[STORE_COLUMNS_KEY] = [name for name in grown[STORE_COLUMNS_KEY] if name in old_columns]
    (folder / BUILD_FILE).write_text(json.dumps(grown, indent=2, sort_keys=True), encoding="utf-8")
    return grown


def _check_shards(settings: RetrievalSettings, n_docs: int) -> None:
    """:raises InputError: If `index_shards` asks for more shards than there are passages."""
    if n_docs and settings.index_shards is not None and settings.index_shards > n_docs:
        raise InputError(
            f"index_shards must be at most the {n_docs} documents with content, not {settings.index_shards}."
        )


def _build_record(
    settings: RetrievalSettings,
    documents: str,
    corpus: tuple[int, int, str],
    shards: tuple[int, int, int | None],
    n_sources: int | None,
    started: float,
) -> dict[str, Any]:
    """
    The build record (`build.json`) of an index of a corpus of (documents, terms, fingerprint) in shards of
    (shards, passages per shard, the memory budget in bytes that chose that size or None).
    """
    n_docs, n_terms, corpus_fingerprint = corpus
    n_shards, shard_size, budget = shards
    record = {
        "documents": n_docs,
        "shards": n_shards,
        "shard_size": shard_size,
        "memory_budget": budget,
        "store": True,  # each shard's passages in its `store.arrow` (split: its source documents, `jobs.passages`)
        STORE_COLUMNS_KEY: stored_columns(documents),
        "vocabulary": n_terms,
        "build_s": round(time.time() - started, 3),
        "algorithm": settings.bm25_algorithm,
        "parameters": settings.parameters(),
        "tokenization_regex": DEFAULT_TOKENIZATION_REGEX,
        "fingerprint": corpus_fingerprint,
        "documents_files": input_fingerprint(documents),
        **_split_record(settings),
    }
    if settings.split_length is not None:
        record["source_documents"] = n_sources  # "documents" counts the passages
    return record


def _split_record(settings: RetrievalSettings) -> dict[str, Any]:
    """How the documents were split for indexing, as the build record holds it."""
    return {"split_length": settings.split_length, "split_overlap": settings.split_overlap}


def write_index(built: BuiltIndex, location: str) -> None:
    """
    Writes an index folder (replacing one there): the shards (with their passages), then `build.json`. A local
    folder appears complete or not at all (written beside it, then renamed); a remote one is complete once
    `build.json` is there.
    """
    record = built.record
    filesystem, inner = resolve_path(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        target = Path(inner)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        _save_shards(built, partial)
        (partial / BUILD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        partial.rename(target)
        return
    with tempfile.TemporaryDirectory() as local:
        _save_shards(built, Path(local))
        if filesystem.get_file_info(inner).type != pafs.FileType.NotFound:
            filesystem.delete_dir(inner)
        pafs.copy_files(local, inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=filesystem)
    with filesystem.open_output_stream(f"{inner.rstrip('/')}/{BUILD_FILE}") as stream:
        stream.write(json.dumps(record, indent=2, sort_keys=True).encode("utf-8"))


def _save_shards(built: BuiltIndex, folder: Path) -> None:
    """
    Each shard into its folder, with its passage store, or when the documents were split where its passages lie
    and its source documents' store.
    """
    shards = built.shards
    for shard, shard_folder in zip(shards, shard_locations(str(folder), len(shards)), strict=True):
        shard.save(shard_folder)
        start, stop = shard.doc_offset, shard.doc_offset + len(shard.doc_ids)
        if built.passages is None:
            write_store(Path(shard_folder), [built.store.slice(start, stop - start)])
        else:
            passages, sources = split_window(built.passages, built.store, start, stop)
            save_split(Path(shard_folder), passages, [sources])


def check_given_index(settings: RetrievalSettings, documents: str) -> dict[str, Any]:
    """
    Checks an `--index` folder against the run: built with the run's algorithm, parameters and splitting, and
    from `--documents`. Cheap when the documents' files are the ones it was built from (same paths, sizes and
    modification times, recorded in `build.json`); otherwise the documents are read once (and split) and
    fingerprinted (ids and contents, in order), which also accepts an unchanged copy.

    :returns: The index's build record.
    :raises InputError: If the folder is not a complete index, or was built otherwise or from other documents.
    """
    shown = redact(settings.index)
    record = _read_json(settings.index, BUILD_FILE)
    shards = record.get("shards", 1) if isinstance(record, dict) else 1
    header = _read_json(shard_locations(settings.index, shards)[0], HEADER_FILE)
    if not isinstance(record, dict) or not isinstance(header, dict):
        raise InputError(
            f"--index {shown}: not a complete index folder (no {BUILD_FILE} or {HEADER_FILE}); build one with "
            "`python -m jobs.index --documents D --output DIR`."
        )
    if header.get("tokenization_regex") != DEFAULT_TOKENIZATION_REGEX:
        raise InputError(
            f"--index {shown} was built with the tokenization regex {header.get('tokenization_regex')!r}, not "
            f"this version's {DEFAULT_TOKENIZATION_REGEX!r}: rebuild it with `python -m jobs.index`."
        )
    built_with = (header.get("algorithm"), header.get("parameters"))
    wanted = (settings.bm25_algorithm, settings.parameters())
    if built_with != wanted:
        raise InputError(
            f"--index {shown} was built with {built_with[0]} {built_with[1]}, not this run's bm25_algorithm "
            f"{wanted[0]} and bm25_parameters {wanted[1]}: rebuild it or pass the settings it was built with."
        )
    split = {"split_length": record.get("split_length"), "split_overlap": record.get("split_overlap", 0)}
    if split != _split_record(settings):
        built_split = ", ".join(f"{key} {value}" for key, value in split.items())
        raise InputError(
            f"--index {shown} was built with {built_split}, not this run's split_length {settings.split_length} "
            f"and split_overlap {settings.split_overlap}: rebuild it or pass the settings it was built with."
        )
    _check_split_layout(settings.index, record)
    if header.get("doc_offset") != 0 or header.get("corpus", {}).get("n_docs") != record.get("documents"):
        raise InputError(f"--index {shown}: its first shard's corpus does not match its {BUILD_FILE}.")
    if settings.dense:
        _check_dense(settings.index, record, settings)
    if record.get("documents_files") != input_fingerprint(documents):
        total, position = 0, 0
        for batch_ids, batch_texts, _ in _indexed_texts(documents, settings):
            total += fingerprint_value(batch_ids, batch_texts, position)
            position += len(batch_ids)
        if fingerprint_hex(total) != header.get("corpus", {}).get("fingerprint"):
            raise InputError(
                f"--index {shown} was built from other documents than --documents {redact(documents)} (their ids "
                "and contents differ from the index's fingerprint): rebuild it with `python -m jobs.index`."
            )
    return _summary(record)


def _check_split_layout(location: str, record: dict[str, Any]) -> None:
    """
    :raises InputError: If an index of split passages keeps them in the earlier layout (`passages.json`, no store
        of their source documents: `jobs.passages`).
    """
    if _earlier_split(record):
        raise InputError(
            f"--index {redact(location)}: an index of split passages built by an earlier version (no store of their "
            "source documents): rebuild it with `python -m jobs.index`."
        )


def _check_dense(location: str, record: dict[str, Any], settings: RetrievalSettings) -> None:
    """
    :raises InputError: If an `--index` holds no vectors, or those of another embedding model, or of an earlier
        format.
    """
    shown, dense = redact(location), record.get("dense")
    if not isinstance(dense, dict):
        raise InputError(
            f"--index {shown} holds no dense vectors (built for BM25 only): rebuild it with `python -m jobs.index "
            f"--retrieval {settings.retrieval} --embedding-model {redact(settings.embedding_model)}`."
        )
    if dense.get("fingerprint") != _fingerprint(settings):
        raise InputError(
            f"--index {shown} holds the vectors of embedding model {redact(str(dense.get('model')))}, not of this "
            f"run's --embedding-model {redact(settings.embedding_model)} (their files' fingerprints differ): rebuild "
            "it or pass the model it was built with."
        )
    found = _dense_format(location, dense)
    if found != DENSE_FORMAT:
        raise InputError(
            f"--index {shown} holds dense shards of format {found}, not this version's {DENSE_FORMAT}: rebuild it "
            "with `python -m jobs.index`."
        )


def _dense_format(location: str, dense: dict[str, Any]) -> str | None:
    """The format of the index's first dense shard (`dense.json`'s), or None where it has none."""
    shards = dense.get("shards") or [{}]
    header = _read_json(f"{location.rstrip('/')}/{shards[0].get('folder')}", DENSE_HEADER_FILE)
    return header.get("format") if isinstance(header, dict) else None


def _earlier_split(record: dict[str, Any]) -> bool:
    """Whether a build record is an index of split passages of the earlier layout (`passages.json`, no stores)."""
    return record.get("split_length") is not None and not record.get("store")


def retrieved_questions(
    questions: Any,
    wave: dict[str, Any],
    settings: RetrievalSettings,
    plan: IndexPlan,
    cluster_cpus: float,
    engine: Engine,
) -> Any:
    """
    The wave's questions, those without `document_ids` given their retrieved documents (see
    `workers.retrieve.RetrieveDocuments`), and with `plan.store` each its documents' texts (`workers.fetch`),
    materialized: both the explode and the question stages read them.
    The index's shards are memory-mapped by retrieval actors, a run of consecutive shards each, their stages chained
    (each merges its hits into the earlier stages'); like the reader actors, the actors reserve a fraction of a CPU,
    together at most a quarter of the cluster's, so that the tasks around them always find CPUs.
    """
    locations = plan.shard_locations
    retrieved = questions.map_batches(wave_questions, batch_format="pyarrow", fn_kwargs=wave, num_cpus=engine.task_cpus)
    if settings.retrieval != "dense":
        retrieved = bm25_shard_stages(retrieved, locations, settings.retriever_top_k, cluster_cpus, engine)
    if settings.dense:
        retrieved = retrieved.map_batches(
            RetrieveDense,
            batch_format="pyarrow",
            batch_size=QUESTIONS_PER_RETRIEVAL_BATCH,
            compute=engine.actor_pool(1),
            fn_constructor_kwargs={
                "location": plan.location,
                "dense": plan.record["dense"],
                "bm25_shards": locations,
                "retriever_top_k": settings.retriever_top_k,
                "hybrid": settings.retrieval == "hybrid",
                "join_mode": settings.join_mode,
                "join_weights": settings.fusion_weights(),
                "cpu_threads": int(cluster_cpus or 1),
                "search_precision": settings.embedding_search_precision,
                "ann_search": settings.ann_search(),
                "device": engine.reader_device(),
            },
            num_cpus=min(RETRIEVAL_ACTOR_MAX_CPUS, (cluster_cpus or 1) / 4),
        )
    if plan.store:
        retrieved = retrieved.map_batches(
            fetch_passages,
            batch_format="pyarrow",
            fn_kwargs={"locations": locations, "documents": plan.documents},
            num_cpus=engine.task_cpus,
        )
    return retrieved.materialize()


def bm25_shard_stages(
    questions: Any,
    locations: list[str],
    top_k: int,
    cluster_cpus: float,
    engine: Engine,
    stages_per_cpu: float = BM25_STAGES_PER_CPU,
) -> Any:
    """
    `questions` (`id`, `query`, optional `document_ids`) through the BM25 shards' retrieval stages, chained in
    corpus order (`shard_stages`): each stage's consecutive shards memory-mapped by an actor of its own
    (`workers.retrieve.RetrieveDocuments`), which merges its hits into the earlier stages'; the actors together
    reserve at most a quarter of the cluster's CPUs.
    """
    stages = shard_stages(locations, cluster_cpus, stages_per_cpu)
    for stage in stages:
        questions = questions.map_batches(
            RetrieveDocuments,
            batch_format="pyarrow",
            batch_size=QUESTIONS_PER_RETRIEVAL_BATCH,
            compute=engine.actor_pool(1),
            fn_constructor_kwargs={"locations": stage, "retriever_top_k": top_k},
            num_cpus=min(RETRIEVAL_ACTOR_MAX_CPUS, (cluster_cpus or 1) / (4 * len(stages))),
        )
    return questions


def shard_stages(
    locations: list[str], cluster_cpus: float, stages_per_cpu: float = BM25_STAGES_PER_CPU
) -> list[list[str]]:
    """
    The shards split into consecutive runs, one retrieval stage each: `stages_per_cpu` per CPU of the cluster, at
    least one, at most one per shard, their sizes differing by at most one (the first stages the smaller: their
    shards are searched with lower floors, or none, so each costs more).
    """
    n_stages = max(1, min(len(locations), round((cluster_cpus or 1) * stages_per_cpu)))
    bounds = shard_bounds(len(locations), n_stages)
    return [locations[start:stop] for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    """A build record as the manifest shows it (without the documents' files and the default tokenization regex)."""
    return {key: value for key, value in record.items() if key not in ("documents_files", "tokenization_regex")}


def stored_columns(documents: str) -> list[str]:
    """The documents' columns that the passage stores of an index of them keep besides ids and texts."""
    names = parquet_dataset(documents).schema.names
    return [name for name in STORED_COLUMNS if name in names]


def _document_batches(documents: str, stored: bool = False) -> Iterator[pa.RecordBatch]:
    """
    The documents with content, batch by batch in table order: `id` and `content`, with `stored` also the columns
    of theirs that passage stores keep (`stored_columns`).
    """
    columns = ["id", "content", *(stored_columns(documents) if stored else [])]
    scanner = parquet_dataset(documents).scanner(
        columns=columns, filter=pc.field("content").is_valid(), batch_size=_DOCUMENTS_PER_READ
    )
    yield from scanner.to_batches()


def _indexed_batch(batch: pa.RecordBatch, settings: RetrievalSettings) -> tuple[list[str], list[str], Any]:
    """
    What the index holds of a batch of documents with content: the documents (ids, texts, None), or with
    `split_length` their passages (ids, texts, and where they lie: `passage_columns`, `source` a row of the batch).
    """
    ids, texts = batch.column("id").to_pylist(), batch.column("content").to_pylist()
    if settings.split_length is None:
        return ids, texts, None
    return split_batch(ids, texts, settings.split_length, settings.split_overlap)


def _indexed_texts(documents: str, settings: RetrievalSettings) -> Iterator[tuple[list[str], list[str], Any]]:
    """What the index holds (`_indexed_batch`), batch by batch in table order."""
    for batch in _document_batches(documents):
        yield _indexed_batch(batch, settings)


def _read_json(location: str, name: str) -> Any | None:
    """A JSON file of a folder on any filesystem; None when it does not exist or is not valid JSON."""
    filesystem, inner = resolve_path(location)
    try:
        with filesystem.open_input_stream(f"{inner.rstrip('/')}/{name}") as stream:
            return json.loads(stream.read().decode("utf-8"))
    except (FileNotFoundError, ValueError):
        return None
