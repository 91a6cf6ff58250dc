"""
Grows an index built by Ray with more documents, as new shards, without reading its documents again
(`python -m jobs.index --add`).
"""

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from jobs.indexing.bm25 import (
    weigh_shards,
)
from jobs.indexing.build import cluster_cpus, count_checked_shards, memory_budget_bytes, node_cpus
from jobs.indexing.check import check_split_layout
from jobs.indexing.memory import bounded
from jobs.indexing.passages import passage_shards
from jobs.indexing.record import BUILD_FILE, STORE_COLUMNS_KEY, build_record, shard_locations
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, read_json, redact, resolve_path
from qa_core.retrieval.index_io import HEADER_FILE
from qa_core.retrieval.statistics import FREQUENCIES_FILE, STATISTICS_FILE, CorpusStatistics


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
    record = read_json(location, BUILD_FILE)
    if not isinstance(filesystem, pafs.LocalFileSystem) or not isinstance(record, dict):
        raise InputError(f"--index {redact(location)}: not a complete local index folder (no {BUILD_FILE}).")
    if "dense" in record:
        raise InputError(
            f"--index {redact(location)}: it holds the passages' vectors too (dense retrieval); --add grows a BM25 "
            "index only: build the dense or hybrid index again with --documents and --output."
        )
    check_split_layout(location, record)
    try:
        before = CorpusStatistics.load(folder)
    except ValueError as error:
        raise InputError(
            f"--index {redact(location)}: it keeps no corpus statistics to grow from (built by the in-process "
            f"engine or an earlier version): rebuild it with `python -m jobs.index`. {error}"
        ) from None
    budget = RetrievalSettings(memory_budget=budget_gib)
    size = min(record["shard_size"], bounded(budget, node_cpus()).index_shard_size)
    settings = RetrievalSettings(
        bm25_algorithm=record["algorithm"], bm25_parameters=record["parameters"], index_shard_size=size,
        split_length=record.get("split_length"), split_overlap=record.get("split_overlap", 0),
    )  # fmt: skip
    old_shards = record["shards"]
    headers = {shard: read_json(shard, HEADER_FILE) for shard in shard_locations(str(folder), old_shards)}
    passages, n_added = passage_shards(documents, settings, first_position=before.n_docs, cpus=cluster_cpus())
    locations = shard_locations(str(folder), old_shards + len(range(0, n_added, size)))
    old = [(shard, header["doc_offset"]) for shard, header in headers.items()]
    try:
        added = count_checked_shards(passages, locations[old_shards:], settings,
                              f"{redact(documents)}: cannot add the documents to the index", old)  # fmt: skip
    except BaseException:
        for shard in locations[old_shards:]:
            shutil.rmtree(shard, ignore_errors=True)
        raise
    statistics = CorpusStatistics.merge([before, added.statistics])
    (folder / BUILD_FILE).unlink()  # incomplete until the new record is written
    if old_shards == 1:  # a one-shard index keeps its files at the top: into shard-00000/ beside the new shards
        Path(locations[0]).mkdir()
        shard_folders = {Path(shard).name for shard in locations}
        for path in list(folder.iterdir()):  # its files and its own statistics (`bm25.SHARD_STATISTICS`)
            if path.name not in (STATISTICS_FILE, FREQUENCIES_FILE, *shard_folders):
                path.rename(Path(locations[0]) / path.name)
    # The added shards first: theirs are the longer tasks (their terms put in order, all their files written).
    shards = list(zip(locations[old_shards:], range(before.n_docs, statistics.n_docs, size), added.fingerprints,
                      added.parts, strict=True))  # fmt: skip
    shards += [(location, header["doc_offset"], header["fingerprint"], 1)
               for location, header in zip(locations, headers.values(), strict=False)]  # fmt: skip
    weigh_shards(shards, statistics, settings)
    statistics.save(folder)
    corpus = (statistics.n_docs, len(statistics.vocabulary), statistics.fingerprint_hex)
    grown = build_record(
        settings, documents, corpus, (len(locations), size, memory_budget_bytes(budget)), None, started
    )
    grown["documents_files"] = [record["documents_files"], grown["documents_files"]]
    if settings.split_length is not None:
        grown["source_documents"] = record["source_documents"] + added.sources
    grown["store"] = grown["store"] and record.get("store", False)  # an older index's shards have none
    old_columns = record.get(STORE_COLUMNS_KEY, [])  # the columns every shard's store keeps
    grown[STORE_COLUMNS_KEY] = [name for name in grown[STORE_COLUMNS_KEY] if name in old_columns]
    (folder / BUILD_FILE).write_text(json.dumps(grown, indent=2, sort_keys=True), encoding="utf-8")
    return grown
