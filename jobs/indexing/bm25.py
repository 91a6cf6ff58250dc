"""
The BM25 index of `indexed_passages` built by Ray Data in two passes over the passages, the driver holding the
corpus statistics only:

1. statistics: tasks count the terms of batches of passages (`CorpusStatistics.of_texts`), and the driver merges
   the batches' statistics in corpus order as they stream in (one reduction: the vocabulary, document
   frequencies, documents, total length and fingerprint), then turns them into idf and avgdl exactly as the
   single-process build does;
2. shards: the passages regrouped into blocks of one shard each (`repartition`, streaming, no shuffle) and each
   shard tokenized again, weighed with the statistics (`sharding.build_shard`) and written into its folder by a
   task, with its term counts, then freed.

Both passes tokenize: the second pass costs a second tokenization of every passage instead of holding the first
pass's term counts of the whole corpus. The index is bit for bit the one `sharding.build_sharded` makes of the
same shards. A corpus that grows: the added passages go through both passes as new shards, and the old shards
are weighed again from their term counts (`reweigh_shards`).
"""

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from jobs.bulk_qa.workers.passages import Passages
from jobs.bulk_qa.workers.retrieve import RetrievalSettings
from jobs.bulk_qa.workers.storage import resolve_path
from qa_core.retrieval.corpus import check_corpus
from qa_core.retrieval.fingerprint import fingerprint_hex
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.sharding import ShardCounts, build_shard, reweigh_shard
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer

# Passages counted per batch in the statistics pass: each batch sends its vocabulary to the driver.
STATISTICS_BATCH = 16384
# The statistics of one batch, one row.
_STATISTICS_SCHEMA = pa.schema(
    [
        ("vocabulary", pa.list_(pa.string())),
        ("doc_frequencies", pa.list_(pa.int64())),
        ("n_docs", pa.int64()),
        ("total_length", pa.int64()),
        ("fingerprint", pa.string()),
        # The batch's source documents: how many, the first and the last (a document's passages are consecutive).
        ("sources", pa.int64()),
        ("first_source", pa.string()),
        ("last_source", pa.string()),
        ("error", pa.string()),  # why the batch cannot be indexed (bad input), else null
    ]
)


def corpus_statistics(passages: Any, tokenization_regex: str) -> tuple[CorpusStatistics, int]:
    """
    The statistics of the passages (`indexed_passages`' dataset, in corpus order), counted by Ray Data tasks and
    merged in the driver in corpus order.

    :returns: The statistics, and how many source documents the passages come from.
    :raises ValueError: If a batch's ids are not unique non-empty strings.
    """
    parts = passages.select_columns(["position", "id", "content", "source_id"]).map_batches(
        _batch_statistics,
        batch_format="pyarrow",
        batch_size=STATISTICS_BATCH,
        fn_kwargs={"tokenization_regex": tokenization_regex},
    )
    sources = _SourceCount()
    statistics = CorpusStatistics.merge(
        part
        for table in parts.iter_batches(batch_size=None, batch_format="pyarrow")
        for part in _rows_statistics(table, sources)
    )
    return statistics, sources.total


class _SourceCount:
    """Source documents counted batch by batch in corpus order (a document cut between two batches counts once)."""

    def __init__(self) -> None:
        self.total, self.last = 0, None

    def add(self, sources: int, first: str | None, last: str | None) -> None:
        self.total += sources - (first is not None and first == self.last)
        self.last = last if last is not None else self.last


def write_shards(
    passages: Any,
    statistics: CorpusStatistics,
    settings: RetrievalSettings,
    locations: list[str],
    shard_size: int,
    first_position: int = 0,
) -> list[dict[str, Any]]:
    """
    Builds and writes each shard of the passages by a Ray Data task, with its term counts (`ShardCounts`, to
    weigh it again when the corpus grows): the passages, from corpus position `first_position` on (documents
    added to an index), in shards of `shard_size`, go into the last of `locations`, in order.

    :returns: Per shard, in order: its `shard` number, `n_docs`, `fingerprint` and `vocabulary` size.
    :raises ValueError: If a shard's passages cannot be indexed (ids not unique in it, or not non-empty strings).
    """
    import ray

    algorithm, parameters = settings.bm25_algorithm, settings.parameters()
    weights = ray.put(statistics.weights(algorithm, parameters))
    first_shard = len(locations) - -(-(statistics.n_docs - first_position) // shard_size)
    written = passages.repartition(target_num_rows_per_block=shard_size, strict=True).map_batches(
        _write_shard,
        batch_format="pyarrow",
        batch_size=None,  # one block: one shard
        fn_kwargs={
            "weights": weights,
            "locations": locations,
            "shard_size": shard_size,
            "first_position": first_position,
            "first_shard": first_shard,
            "n_docs": statistics.n_docs,
            "algorithm": algorithm,
            "parameters": parameters,
            "tokenization_regex": DEFAULT_TOKENIZATION_REGEX,
            "split": settings.split_length is not None,
        },
    )
    rows = sorted(written.take_all(), key=lambda row: row["shard"])
    errors = [row["error"] for row in rows if row["error"] is not None]
    if errors:
        raise ValueError(errors[0])
    return rows


def _batch_statistics(batch: pa.Table, tokenization_regex: str) -> pa.Table:
    """A batch of consecutive passages -> its statistics, one row."""
    positions = batch["position"].to_numpy()
    if positions.size and positions[-1] - positions[0] != positions.size - 1:
        raise ValueError(f"The batch of passages from position {positions[0]} is not contiguous.")
    first = int(positions[0]) if positions.size else 0
    ids, texts = batch["id"].to_pylist(), batch["content"].to_pylist()
    try:
        if ids:
            check_corpus(ids, texts)  # ids unique within the batch; across batches only within a shard
    except ValueError as error:
        columns = {name: [None] for name in _STATISTICS_SCHEMA.names}
        return pa.table({**columns, "error": [str(error)]}, schema=_STATISTICS_SCHEMA)
    part = CorpusStatistics.of_texts(ids, texts, first, Tokenizer(tokenization_regex))
    row = {
        "vocabulary": [part.vocabulary],
        "doc_frequencies": [part.doc_frequencies],
        "n_docs": [part.n_docs],
        "total_length": [part.total_length],
        "fingerprint": [fingerprint_hex(part.fingerprint)],
        "sources": [pc.count_distinct(batch["source_id"]).as_py()],
        "first_source": [batch["source_id"][0].as_py() if batch.num_rows else None],
        "last_source": [batch["source_id"][-1].as_py() if batch.num_rows else None],
        "error": [None],
    }
    return pa.table(row, schema=_STATISTICS_SCHEMA)


def _rows_statistics(table: pa.Table, sources: _SourceCount) -> Iterator[CorpusStatistics]:
    """The `CorpusStatistics` of each row of a table of `_STATISTICS_SCHEMA`, in order, counting the sources."""
    for row in range(table.num_rows):
        if table["error"][row].is_valid:
            raise ValueError(table["error"][row].as_py())
        sources.add(*(table[name][row].as_py() for name in ("sources", "first_source", "last_source")))
        yield CorpusStatistics(
            vocabulary=table["vocabulary"][row].values.to_pylist(),
            doc_frequencies=table["doc_frequencies"][row].values.to_numpy(zero_copy_only=False).astype(np.int64),
            n_docs=table["n_docs"][row].as_py(),
            total_length=table["total_length"][row].as_py(),
            fingerprint=int(table["fingerprint"][row].as_py(), 16),
        )


def _write_shard(
    batch: pa.Table,
    weights: Any,
    locations: list[str],
    shard_size: int,
    first_position: int,
    first_shard: int,
    n_docs: int,
    algorithm: str,
    parameters: dict[str, float],
    tokenization_regex: str,
    split: bool,
) -> pa.Table:
    """One shard's passages -> its index written into its folder (with `passages.json` when split); one row."""
    import ray

    positions = batch["position"].to_numpy()
    first = int(positions[0])
    within = first - first_position  # the shard's place among the passages written
    if within % shard_size or batch.num_rows != min(shard_size, n_docs - first) or positions[-1] - first >= shard_size:
        raise ValueError(f"The block of passages from position {first} is not one whole shard of {shard_size}.")
    shard, ids, texts = first_shard + within // shard_size, batch["id"].to_pylist(), batch["content"].to_pylist()
    try:
        index, counts = build_shard(ids, texts, first, ray.get(weights), algorithm, parameters, tokenization_regex)
    except ValueError as error:  # bad input: the driver raises it
        return pa.table(
            {"shard": [shard], "n_docs": [0], "fingerprint": [""], "vocabulary": [0], "error": [str(error)]}
        )
    del texts
    passages = None
    if split:
        passages = Passages(batch["source_id"].to_pylist(), batch["start"].to_pylist(), batch["end"].to_pylist())
    save_files(locations[shard], lambda folder: _save_local(index, counts, passages, folder))
    return pa.table(
        {
            "shard": [shard],
            "n_docs": [index.n_docs],
            "fingerprint": [index.fingerprint],
            "vocabulary": [len(index.vocabulary)],
            "error": pa.array([None], pa.string()),
        }
    )


def reweigh_shards(locations: list[str], statistics: CorpusStatistics, settings: RetrievalSettings) -> None:
    """
    Weighs local shards again with the statistics of their grown corpus (`sharding.reweigh_shard`, from their
    term counts, without tokenizing), a Ray Data task per shard, each rewriting its shard's weights and header.
    """
    import ray
    import ray.data

    weights = ray.put(statistics.weights(settings.bm25_algorithm, settings.parameters()))
    shards = ray.data.from_items([{"location": location} for location in locations], override_num_blocks=len(locations))
    shards.map_batches(_reweigh, batch_size=1, fn_kwargs={"weights": weights}).materialize()


def _reweigh(batch: dict[str, Any], weights: Any) -> dict[str, Any]:
    """One shard folder (local) weighed again and rewritten in place."""
    import ray

    folder = Path(str(batch["location"][0]))
    index = reweigh_shard(BM25Index.load(folder, mmap=False), ShardCounts.load(folder), ray.get(weights))
    index.save(folder)
    return batch


def save_files(location: str, save: Callable[[Path], None]) -> None:
    """Runs `save(folder)` into a folder at `location`, local or remote (written locally, then copied)."""
    filesystem, inner = resolve_path(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        Path(inner).mkdir(parents=True, exist_ok=True)
        save(Path(inner))
        return
    with tempfile.TemporaryDirectory() as local:
        save(Path(local))
        pafs.copy_files(local, inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=filesystem)


def _save_local(index: BM25Index, counts: ShardCounts, passages: Passages | None, folder: Path) -> None:
    index.save(folder)
    counts.save(folder)
    if passages is not None:
        passages.save(folder)
