"""
Builds an index of a documents table: in this process (`build_index`, for corpora that fit in its memory, the
in-process engine's), or by Ray Data (`build_index_with_ray`, `jobs.indexing.bm25`: the driver holds the corpus
statistics only; each shard is tokenized once by a task that writes its term counts, then weighed from them and
written by another); the same index bit for bit. `write_index` saves one built in memory.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.indexing.bm25 import (
    CountedPassages,
    check_unique_ids,
    count_shards,
    save_files,
    shard_id_hashes,
    weigh_shards,
)
from jobs.indexing.documents import document_batches, indexed_batch
from jobs.indexing.memory import bounded, memory_budget
from jobs.indexing.passages import passage_shards
from jobs.indexing.record import BUILD_FILE, build_record, shard_locations
from jobs.passages import Passages, check_source_ids, save_split, split_window
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, redact, written_in_place
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.sharding import build_shards
from qa_core.retrieval.store import write_store
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX


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
    budget = memory_budget_bytes(settings)
    settings = bounded(settings, 1)  # one process builds the whole corpus
    ids: list[str] = []
    texts: list[str] = []
    passages: list[pa.Table] = []  # split: where each passage lies, `source` counted over all the documents
    stored: list[pa.RecordBatch] = []  # the documents: the shards' passage (or source) stores
    for batch in document_batches(documents, stored=True):
        batch_ids, batch_texts, batch_passages = indexed_batch(batch, settings)
        ids += batch_ids
        texts += batch_texts
        if batch_passages is not None:
            first = sum(map(len, stored))
            passages.append(batch_passages.set_column(0, "source", pc.add(batch_passages["source"], first)))
        stored.append(batch)
    check_shard_count(settings, len(texts))
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
    record = build_record(settings, documents, corpus, (len(shards), size, budget), n_sources, started)
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
    budget = memory_budget_bytes(settings)
    settings = bounded(settings, node_cpus())
    passages, n_docs = passage_shards(documents, settings, cpus=cluster_cpus())
    check_shard_count(settings, n_docs)
    size = settings.shard_size(n_docs)
    n_shards = len(range(0, n_docs, size))
    # Ray's tasks write the shards into the folder, a remote one in place (complete once `build.json` is there).
    with written_in_place(location, staged=False) as staged:
        locations = shard_locations(staged.path, n_shards)
        problem = f"{redact(documents)}: cannot build the BM25 index of the documents"
        counted = count_checked_shards(passages, locations, settings, problem)
        statistics = counted.statistics
        weigh_shards(list(zip(locations, range(0, n_docs, size), counted.fingerprints, counted.parts, strict=True)),
                     statistics, settings)  # fmt: skip
        save_files(staged.path, statistics.save)  # what `add_documents_with_ray` grows the index from
        corpus = (statistics.n_docs, len(statistics.vocabulary), statistics.fingerprint_hex)
        record = build_record(settings, documents, corpus, (n_shards, size, budget), counted.sources, started)
        staged.last[BUILD_FILE] = json.dumps(record, indent=2, sort_keys=True).encode("utf-8")
    return record


def count_checked_shards(
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


def cluster_cpus() -> int:
    """The CPUs of the running Ray cluster (at least 1)."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def node_cpus() -> int:
    """The CPUs of the running Ray cluster's largest node (at least 1): the build tasks a node runs at once."""
    import ray

    return max([1, *(int(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node["Alive"])])


def memory_budget_bytes(settings: RetrievalSettings) -> int | None:
    """The bytes of memory the build's shard size is chosen for; None where a shard setting is given."""
    return memory_budget(settings.memory_budget) if settings.sized_by_memory else None


def check_shard_count(settings: RetrievalSettings, n_docs: int) -> None:
    """:raises InputError: If `index_shards` asks for more shards than there are passages."""
    if n_docs and settings.index_shards is not None and settings.index_shards > n_docs:
        raise InputError(
            f"index_shards must be at most the {n_docs} documents with content, not {settings.index_shards}."
        )


def write_index(built: BuiltIndex, location: str) -> None:
    """
    Writes an index folder (replacing one there): the shards (with their passages), then `build.json`
    (`written_in_place`: a local folder appears complete or not at all; a remote one is complete once `build.json`
    is there).
    """
    with written_in_place(location) as staged:
        _save_shards(built, Path(staged.path))
        staged.last[BUILD_FILE] = json.dumps(built.record, indent=2, sort_keys=True).encode("utf-8")


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
