"""
Brings an index to the documents of a table (`python -m jobs.index --update DOCS --index DIR`): documents that are
new are added, those whose content changed replaced, those no longer in the table deleted, as a new version of the
index (`jobs.indexing.versions`) that is the index a fresh build of the table gives, bit for bit in its hits and
scores (BM25, dense exact, hybrid), its shards aside.

How: the table's ids and a SHA-256 of each document's content are read and compared with those the index keeps
per shard (`bm25.TEXT_HASHES_FILE`, `bm25.SOURCE_HASHES_FILE`). The corpus of the new version is the table's
documents in table order, as a fresh build numbers them. A shard whose documents are all still there, unchanged,
one after the other, and (split passages) none shared with a neighbour shard, is kept: its files linked into the
new version (copied in object storage) and weighed again from its stored counts with the new corpus statistics,
without tokenizing (`sharding.weigh_counted_shard`: only its idf, bounds and header are written again where its
terms keep their order). The positions between kept shards (new and changed documents, and the unchanged
documents of a shard that lost or gained one) are written as new shards by Ray tasks, as the build writes them
(`bm25.count_shards`), except that a passage an old shard holds with the same id and text takes its counts from
there rather than being tokenized again (`qa_core.retrieval.recount`): only new and changed passages are tokenized,
and the few kept ones that became the first of their shard to hold a term (for the order of the vocabulary).
Deleting is rewriting: a shard that lost a document is written again without it, so no deleted document remains
(no tombstones, nothing to compact), and the corpus statistics (documents, average length, document frequencies)
are merged from the shards' own (`bm25.SHARD_STATISTICS`) in corpus order: those of the documents that remain,
with the vocabulary in the order a fresh build numbers it.

The dense part goes the same way: a dense shard that lies inside a kept shard is linked at its new position; the
dense shards of the other positions are written again, each vector read from the old version where it holds a
passage of the same text (the same SHA-256), only new texts embedded; an approximate index (`--ann`) is built
again over all the vectors (one FAISS index over all the shards: `jobs.indexing.ann`). The filter fields an index
keeps (`jobs.indexing.filter_fields`) are written again for every shard from the table's metadata, which may
change where the content does not.

The work of tokenizing and embedding follows the change; reading the table, hashing its documents and writing the
shards a change touches do not: a change spread over every shard writes every shard again (from the counts and
vectors it keeps).
"""

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from jobs.engines import Engine
from jobs.indexing.bm25 import (
    SHARD_STATISTICS,
    SOURCE_HASHES_FILE,
    TEXT_HASHES_FILE,
    count_shards,
    in_folder,
    save_files,
    weigh_shards,
)
from jobs.indexing.build import cluster_cpus, memory_budget_bytes, node_cpus
from jobs.indexing.check import check_split_layout
from jobs.indexing.filter_fields import FILTER_FIELDS_KEY, add_filter_fields
from jobs.indexing.memory import bounded
from jobs.indexing.passages import document_passages, range_shards, read_shard
from jobs.indexing.record import BUILD_FILE, STORE_COLUMNS_KEY, build_record, dense_format, shard_locations
from jobs.indexing.versions import (
    LOCK_FILE,
    VERSION_FILE,
    VERSION_PREFIX,
    current_version,
    next_version,
    remove_other_versions,
    switch_version,
    update_lock,
)
from jobs.passages import PASSAGES_FILE, SOURCE_IDS_FILE, check_source_ids
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, parquet_dataset, read_json, redact, resolve_path
from qa_core.retrieval.dense import DENSE_HEADER_FILE
from qa_core.retrieval.dense import FORMAT as DENSE_FORMAT
from qa_core.retrieval.fingerprint import fingerprint_hex, fingerprint_of_hashes, text_hashes
from qa_core.retrieval.index_io import DOC_IDS_FILE, FORMAT, HEADER_FILE
from qa_core.retrieval.statistics import FREQUENCIES_FILE, STATISTICS_FILE, CorpusStatistics
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX

_READ_ROWS = 65536  # documents read at a time for their ids and content hashes


@dataclass(frozen=True)
class OldShard:
    """
    A shard of the index's current version, as an update compares it with the documents.

    :param location: Its folder.
    :param first: Its first corpus position.
    :param size: Its passages.
    :param source_ids: Its source documents' ids (whole documents: its passages'), in order.
    :param source_hashes: `(sources, 32)` uint8: the SHA-256 of their contents.
    :param lead: How many passages of its first source document lie in the shards before it (0 for whole
        documents); None where that is not known (a document over more than two shards).
    :param last_passages: How many of its passages its last source document makes.
    """

    location: str
    first: int
    size: int
    source_ids: pa.Array
    source_hashes: np.ndarray
    lead: int | None
    last_passages: int


@dataclass(frozen=True)
class Documents:
    """
    The documents with content of the table an index is brought to, in table order.

    :param ids: Their ids.
    :param hashes: `(documents, 32)` uint8: the SHA-256 of their contents.
    """

    ids: pa.Array
    hashes: np.ndarray


@dataclass(frozen=True)
class Update:
    """
    An update checked before any work (`check_update`).

    :param location: The index folder.
    :param documents: The documents table it is brought to.
    :param current: The folder of its current version.
    :param record: That version's build record.
    :param new: The documents' ids and content hashes.
    :param started: When the update started (`time.time()`).
    """

    location: str
    documents: str
    current: str
    record: dict[str, Any]
    new: Documents
    started: float


def check_update(location: str, documents: str, settings: RetrievalSettings) -> Update:
    """
    Checks an update of the index at `location` to the documents of `documents` before any work: reads the
    documents' ids and content hashes.

    :param settings: The command line's: an `embedding_model` given must be the index's.
    :raises InputError: The documents repeat an id, the folder is not an index this version can update (another
        format, or built before its shards kept their content hashes), or the index's vectors are of another
        embedding model than `settings`' or than its model's files now.
    """
    started = time.time()
    current = current_version(location)
    record = _checked_record(location, current, settings)
    return Update(location, documents, current, record, _read_documents(documents), started)


def update_index_with_ray(
    update: Update, settings: RetrievalSettings, engine: Engine, cluster: dict[str, Any]
) -> dict[str, Any] | None:
    """
    Brings the index to the documents (module docstring), as a new version that it switches to at the end; its own
    settings are kept. Needs a running Ray.

    :param update: `check_update`'s.
    :param settings: The command line's: its `memory_budget` bounds the shards written.
    :returns: The new version's build record, with an `update` section (documents added, changed, deleted and
        unchanged, shards kept and written, passages counted, vectors embedded); None when nothing changed.
    :raises InputError: If another update of the index runs (`versions.update_lock`), or the documents cannot be
        indexed.
    """
    location, documents, current, record, new = (update.location, update.documents, update.current, update.record,
                                                  update.new)  # fmt: skip
    started = update.started
    with update_lock(location):
        remove_other_versions(location, None if current == location else current[len(location.rstrip("/")) + 1 :])
        old = _old_shards(current, record)
        index_settings = _index_settings(record, settings)
        groups, per_document = document_passages(documents, index_settings)
        firsts = np.concatenate([[0], np.cumsum(per_document)])
        kept = _kept_shards(old, new, firsts)
        total = int(firsts[-1])
        same = [(shard.location, shard.first) for shard in old] == [(shard.location, first) for shard, first in kept]
        changes = _counts(old, new)
        if same and not (changes["added"] or changes["changed"] or changes["deleted"]):
            return None
        name = next_version(location)
        target = f"{location.rstrip('/')}/{name}"
        size = index_settings.index_shard_size
        layout = _layout(kept, total, size)
        locations = shard_locations(target, len(layout))
        for (shard, _), destination in ((item, locations[at]) for at, item in enumerate(layout) if item[0]):
            _link_shard(shard.location, destination, shard.location == current)
        written = [(first, stop) for at, (shard, (first, stop)) in enumerate(layout) if shard is None]
        written_at = [locations[at] for at, (shard, _) in enumerate(layout) if shard is None]
        counted_fingerprints, counted_parts, tokenized = [], [], 0
        if written:
            earlier = _earlier_locations(old, new, firsts, written)
            passages = range_shards(documents, index_settings, groups, written, cluster_cpus(), earlier)
            try:
                counted = count_shards(passages, written_at, index_settings.split_length is not None)
            except ValueError as error:
                raise InputError(f"{redact(documents)}: cannot index the documents: {error}") from None
            counted_fingerprints, counted_parts, tokenized = counted.fingerprints, counted.parts, counted.tokenized
        statistics, fingerprints = _statistics(layout, locations, counted_fingerprints)
        try:
            statistics.check(DEFAULT_TOKENIZATION_REGEX)
        except ValueError as error:
            raise InputError(f"{redact(documents)}: cannot index the documents: {error}") from None
        parts = iter(counted_parts)
        shards = [(locations[at], first, fingerprints[at], 1 if shard is not None else next(parts))
                  for at, (shard, (first, _)) in enumerate(layout)]  # fmt: skip
        weigh_shards(shards, statistics, index_settings)
        save_files(target, statistics.save)
        corpus = (statistics.n_docs, len(statistics.vocabulary), statistics.fingerprint_hex)
        budget = memory_budget_bytes(RetrievalSettings(memory_budget=settings.memory_budget))
        sources = int(np.count_nonzero(per_document)) if index_settings.split_length is not None else None
        updated = build_record(index_settings, documents, corpus, (len(layout), size, budget), sources, started)
        updated[STORE_COLUMNS_KEY] = [name for name in updated[STORE_COLUMNS_KEY]
                                      if name in record.get(STORE_COLUMNS_KEY, [])]  # fmt: skip
        vectors = 0
        if "dense" in record:
            dense, vectors = _update_dense(record, (current, old), (target, locations), layout, documents, groups,
                                           engine, cluster)  # fmt: skip
            updated["dense"] = dense
        updated["update"] = {
            **changes,
            "shards_kept": sum(shard is not None for shard, _ in layout),
            "shards_written": len(written),
            "passages_counted": sum(stop - first for first, stop in written),
            "passages_tokenized": tokenized,
            "vectors_embedded": vectors,
            "update_s": round(time.time() - started, 3),
        }
        _write_record(target, updated)
        if FILTER_FIELDS_KEY in record:  # every shard's, from the documents' metadata as it is now
            updated[FILTER_FIELDS_KEY] = add_filter_fields(target, updated, documents, record[FILTER_FIELDS_KEY])
        switch_version(location, name)
        remove_other_versions(location, name)
    return updated


def _checked_record(location: str, current: str, settings: RetrievalSettings) -> dict[str, Any]:
    """
    The current version's build record, checked: an index of this version's format that keeps what an update
    needs, and (dense) of the embedding model `settings` names, if any, whose files are as they were.

    :raises InputError: Naming what differs.
    """
    shown = redact(location)
    record = read_json(current, BUILD_FILE)
    if not isinstance(record, dict):
        raise InputError(f"--index {shown}: not a complete index folder (no {BUILD_FILE}).")
    first = shard_locations(current, record.get("shards", 1))[0]
    header = read_json(first, HEADER_FILE)
    found = header.get("format") if isinstance(header, dict) else None
    if found != FORMAT:
        raise InputError(
            f"--index {shown}: an index of format {found}, not this version's {FORMAT}: build it again with "
            "`python -m jobs.index --documents D --output DIR`."
        )
    check_split_layout(location, record)
    filesystem, inner = resolve_path(first)
    if filesystem.get_file_info(f"{inner.rstrip('/')}/{TEXT_HASHES_FILE}").type == pafs.FileType.NotFound:
        raise InputError(
            f"--index {shown}: built by an earlier version, whose shards keep no content hashes to compare the "
            "documents with: build it again with `python -m jobs.index --documents D --output DIR`."
        )
    dense = record.get("dense")
    if isinstance(dense, dict):
        from jobs.indexing.vectors import model_fingerprint

        model = dense.get("model")
        if settings.embedding_model is not None and settings.embedding_model != model:
            raise InputError(
                f"--index {shown} holds the vectors of embedding model {redact(str(model))}, not of "
                f"--embedding-model {redact(settings.embedding_model)}: an update keeps the index's model (leave "
                "--embedding-model out), or build the index again with the other model."
            )
        if dense.get("fingerprint") != model_fingerprint(RetrievalSettings(embedding_model=model)):
            raise InputError(
                f"--index {shown}: the files of its embedding model {redact(str(model))} changed since its vectors "
                "were embedded (their fingerprints differ): build the index again with `python -m jobs.index`."
            )
        if dense_format(current, dense) != DENSE_FORMAT:
            raise InputError(
                f"--index {shown} holds dense shards of format {dense_format(current, dense)}, not this version's "
                f"{DENSE_FORMAT}: build it again with `python -m jobs.index`."
            )
    return record


def _read_documents(documents: str) -> Documents:
    """
    The ids and content hashes of the documents with content, in table order (a batch of texts at a time).

    :raises InputError: If an id is missing, empty or repeated (among all the rows), naming it.
    """
    ids, hashes, all_ids = [], [], []
    scanner = parquet_dataset(documents).scanner(columns=["id", "content"], batch_size=_READ_ROWS)
    for batch in scanner.to_batches():
        all_ids.append(batch["id"].cast(pa.string()))
        with_content = batch.filter(pc.is_valid(batch["content"]))
        ids.append(with_content["id"].cast(pa.string()))
        hashes.append(text_hashes(with_content["content"].cast(pa.string()).to_pylist()))
    try:
        check_source_ids(pa.chunked_array(all_ids, pa.string()))
    except ValueError as error:
        raise InputError(f"--update {redact(documents)}: {error}") from None
    return Documents(
        pa.chunked_array(ids, pa.string()).combine_chunks(),
        np.concatenate(hashes) if hashes else np.zeros((0, 32), np.uint8),
    )


def _old_shards(current: str, record: dict[str, Any]) -> list[OldShard]:
    """The shards of the index's current version, with their source documents' ids and content hashes."""
    split = record.get("split_length") is not None
    shards: list[OldShard] = []
    for location in shard_locations(current, record["shards"]):
        header = read_json(location, HEADER_FILE)
        passage_ids = _read_ids(location, DOC_IDS_FILE)
        lead, last = 0, 1
        if split:
            source_ids, hashes = _read_ids(location, SOURCE_IDS_FILE), _read_array(location, SOURCE_HASHES_FILE)
            passages = _read_table(location, PASSAGES_FILE)
            rows, starts = passages["source"].to_numpy(), passages["start"].to_numpy()
            last = int(np.count_nonzero(rows == rows[-1])) if rows.size else 0
            if starts.size and int(starts[0]) > 0:  # its first document began in the shard before
                before = shards[-1] if shards else None
                single = before is not None and len(before.source_ids) == 1
                lead = None if before is None or (single and before.lead is None) else (
                    before.last_passages + (before.lead if single else 0))  # fmt: skip
        else:
            source_ids, hashes = passage_ids, _read_array(location, TEXT_HASHES_FILE)
        shards.append(OldShard(location, header["doc_offset"], len(passage_ids), source_ids, hashes, lead, last))
    return shards


def _kept_shards(old: list[OldShard], new: Documents, firsts: np.ndarray) -> list[tuple[OldShard, int]]:
    """
    The old shards the new corpus keeps as they are, and their first position in it: their documents all in the
    table, unchanged and one after the other in it (a split document's passages are then the same: a shard that
    begins or ends inside one is kept too, at the position of its passages there).
    """
    index = pd.Index(np.asarray(new.ids.to_numpy(zero_copy_only=False), dtype=object))
    kept = []
    for shard in old:
        at = index.get_indexer(np.asarray(shard.source_ids.to_numpy(zero_copy_only=False), dtype=object))
        if shard.lead is None or not at.size or (at < 0).any() or (np.diff(at) != 1).any():
            continue
        if not np.array_equal(new.hashes[at], shard.source_hashes):
            continue
        first = int(firsts[at[0]]) + shard.lead  # its first passage, where its document's passages begin before it
        if first + shard.size <= int(firsts[at[-1] + 1]):
            kept.append((shard, first))
    return sorted(kept, key=lambda item: item[1])


def _earlier_locations(
    old: list[OldShard], new: Documents, firsts: np.ndarray, ranges: list[tuple[int, int]]
) -> list[list[str]]:
    """
    For each range of the new corpus's positions, the folders of the old shards that hold one of its documents
    unchanged: their passages' counts are taken from there (`recount.recount_shard`), not tokenized again.
    """
    if not old:
        return [[] for _ in ranges]
    held = pd.DataFrame({
        "id": np.asarray(pa.concat_arrays([shard.source_ids for shard in old]).to_numpy(zero_copy_only=False),
                         dtype=object),
        "shard": np.repeat(np.arange(len(old)), [len(shard.source_ids) for shard in old]),
        "row": np.arange(sum(len(shard.source_ids) for shard in old)),
    })  # fmt: skip
    wanted = pd.DataFrame({"id": np.asarray(new.ids.to_numpy(zero_copy_only=False), dtype=object),
                           "document": np.arange(len(new.ids))})  # fmt: skip
    pairs = wanted.merge(held, on="id")
    hashes = np.concatenate([shard.source_hashes for shard in old])
    same = (hashes[pairs["row"].to_numpy()] == new.hashes[pairs["document"].to_numpy()]).all(axis=1)
    documents, shards = pairs["document"].to_numpy()[same], pairs["shard"].to_numpy()[same]
    locations = []
    for first, stop in ranges:  # the documents whose passages lie in the range
        inside = (documents >= np.searchsorted(firsts, first, "right") - 1) & (
            documents < np.searchsorted(firsts, stop, "left"))  # fmt: skip
        locations.append([old[at].location for at in np.unique(shards[inside]).tolist()])
    return locations


def _layout(
    kept: list[tuple[OldShard, int]], total: int, size: int
) -> list[tuple[OldShard | None, tuple[int, int]]]:
    """
    The new version's shards in corpus order: each kept shard with its range of positions, and the positions
    between them in shards of at most `size` passages to write (None).
    """
    layout: list[tuple[OldShard | None, tuple[int, int]]] = []
    position = 0
    for shard, first in [*kept, (None, total)]:
        if first < position:  # overlaps the kept shard before it (documents moved): written again instead
            continue
        layout += [(None, (start, min(start + size, first))) for start in range(position, first, size)]
        if shard is not None:
            layout.append((shard, (first, first + shard.size)))
            position = first + shard.size
    return layout


def _statistics(
    layout: list[tuple[OldShard | None, tuple[int, int]]], locations: list[str], counted: list[str]
) -> tuple[CorpusStatistics, list[str]]:
    """
    The new corpus's statistics, merged from its shards' own in corpus order (a kept shard's fingerprinted again at
    its new position from its passages' ids and text hashes), and each shard's fingerprint (hex).
    """
    fingerprints: list[str] = []
    written = iter(counted)

    def shards() -> Any:
        for (shard, (first, _)), location in zip(layout, locations, strict=True):
            own = in_folder(f"{location.rstrip('/')}/{SHARD_STATISTICS}", CorpusStatistics.load)
            if shard is None:
                fingerprints.append(next(written))
            else:
                ids = _read_ids(location, DOC_IDS_FILE).to_pylist()
                value = fingerprint_of_hashes(ids, _read_array(location, TEXT_HASHES_FILE), first)
                own = replace(own, fingerprint=value)
                fingerprints.append(fingerprint_hex(value))
            yield own

    return CorpusStatistics.merge(shards()), fingerprints


def _counts(old: list[OldShard], new: Documents) -> dict[str, int]:
    """Documents added, changed, deleted and unchanged: the table's against the index's."""
    ids = pa.concat_arrays([shard.source_ids for shard in old]) if old else pa.array([], pa.string())
    hashes = np.concatenate([shard.source_hashes for shard in old]) if old else np.zeros((0, 32), np.uint8)
    before = pd.Index(np.asarray(ids.to_numpy(zero_copy_only=False), dtype=object))
    unique = ~before.duplicated()  # a split document shared by two shards once
    before, hashes = before[unique], hashes[unique]
    at = before.get_indexer(np.asarray(new.ids.to_numpy(zero_copy_only=False), dtype=object))
    found = at >= 0
    same = np.zeros(len(at), bool)
    same[found] = (new.hashes[found] == hashes[at[found]]).all(axis=1)
    return {
        "added": int((~found).sum()),
        "changed": int((found & ~same).sum()),
        "deleted": len(before) - int(found.sum()),
        "unchanged": int(same.sum()),
    }


def _update_dense(
    record: dict[str, Any],
    before: tuple[str, list[OldShard]],
    after: tuple[str, list[str]],
    layout: list[tuple[OldShard | None, tuple[int, int]]],
    documents: str,
    groups: tuple[list[dict[str, Any]], list[int]],
    engine: Engine,
    cluster: dict[str, Any],
) -> tuple[dict[str, Any], int]:
    """
    The new version's dense part: each dense shard that lies inside a kept shard linked at its new position; the
    dense shards of the other positions written again, each passage's vector read from the current version where
    it holds the passage's text, else embedded; and the approximate index built again where the index has one.

    :param before: The current version's folder and its BM25 shards.
    :param after: The new version's folder and its BM25 shards' folders (written: they hold their passages' ids
        and text hashes).
    :returns: The `dense` section, and how many vectors were embedded.
    """
    (current, old_shards), (target, locations) = before, after
    from jobs.indexing.embed import dense_section, embed_passages, shard_folder_name
    from jobs.indexing.vectors import add_graph

    started = time.time()
    dense = record["dense"]
    settings = RetrievalSettings(
        retrieval="dense", embedding_model=dense["model"], embedding_similarity=dense["similarity"],
        embedding_precision=dense["precision"], split_length=record.get("split_length"),
        split_overlap=record.get("split_overlap", 0),
    )  # fmt: skip
    rows, covered = [], []
    for shard, (first, _) in layout:
        if shard is None:
            continue
        for old in dense["shards"]:
            if shard.first <= old["doc_offset"] and old["doc_offset"] + old["n"] <= shard.first + shard.size:
                offset = first + old["doc_offset"] - shard.first
                _link_dense_shard(f"{current.rstrip('/')}/{old['folder']}",
                                  f"{target.rstrip('/')}/{shard_folder_name(offset)}", offset)  # fmt: skip
                rows.append({"folder": shard_folder_name(offset), "doc_offset": offset, "n": old["n"],
                             "embedded": False, "reused": 0})  # fmt: skip
                covered.append((offset, offset + old["n"]))
    total = layout[-1][1][1] if layout else 0
    missing, position = [], 0
    for start, stop in [*sorted(covered), (total, total)]:
        if start > position:
            missing.append((position, start))
        position = max(position, stop)
    if missing:
        to_embed = [(location, first) for location, (_, (first, stop)) in zip(locations, layout, strict=True)
                    if any(start < stop and first < end for start, end in missing)]  # fmt: skip
        earlier = _earlier_positions(old_shards, to_embed, total, whole_documents=settings.split_length is None)
        passages = range_shards(documents, settings, groups, missing).map_batches(
            _passage_rows, batch_size=1, batch_format="pyarrow", fn_kwargs={"earlier": earlier}
        )
        held = [{"location": current, **old} for old in dense["shards"]]
        rows += embed_passages(passages, settings, target, engine, cluster, earlier=held)
    rows.sort(key=lambda row: row["doc_offset"])
    section = dense_section(settings, rows, total, started)
    if "ann" in dense:  # built again as it was built, over all the vectors
        ann = dense["ann"]
        searched = replace(settings, ann=ann["kind"], ann_ef_search=ann.get("ef_search", settings.ann_ef_search),
                           ann_nprobe=ann.get("nprobe", settings.ann_nprobe),
                           ann_candidates=ann.get("candidates", settings.ann_candidates))  # fmt: skip
        _write_record(target, {"dense": section})  # what building it reads; the whole record is written last
        section = add_graph(target, section, searched, engine)
    return section, sum(row["n"] - row["reused"] for row in rows if row["embedded"])


def _earlier_positions(
    old: list[OldShard], shards: list[tuple[str, int]], total: int, whole_documents: bool
) -> np.ndarray:
    """
    `(total,)` int64: for each position of `shards`, a position of the current version's corpus whose passage has
    the same text (the same SHA-256: the same vector); -1 where none has, and at every other position.

    :param shards: The new version's BM25 shards that hold positions to embed: each folder and first position.
    :param whole_documents: Whether the index's passages are whole documents: the old shards' text hashes are then
        their `source_hashes`, not read again.
    """

    def texts(hashes: np.ndarray, first: int) -> pd.DataFrame:
        words = np.ascontiguousarray(hashes).view(np.uint64)  # a SHA-256 as 4 words
        return pd.DataFrame({**{f"h{at}": words[:, at] for at in range(4)},
                             "position": np.arange(first, first + len(words))})  # fmt: skip

    def old_hashes(shard: OldShard) -> np.ndarray:
        return shard.source_hashes if whole_documents else _read_array(shard.location, TEXT_HASHES_FILE)

    earlier = np.full(total, -1, np.int64)
    if not shards or not old:
        return earlier
    keys = ["h0", "h1", "h2", "h3"]
    before = pd.concat([texts(old_hashes(shard), shard.first) for shard in old], ignore_index=True)
    after = pd.concat([texts(_read_array(folder, TEXT_HASHES_FILE), first) for folder, first in shards],
                      ignore_index=True)  # fmt: skip
    pairs = after.merge(before.drop_duplicates(keys), on=keys, suffixes=("", "_before"))
    earlier[pairs["position"].to_numpy()] = pairs["position_before"].to_numpy()
    return earlier


def _passage_rows(item: pa.Table, earlier: np.ndarray) -> pa.Table:
    """
    A range's item (`range_shards`) -> its passages' `position`, `id` and `content`, for embedding, and `earlier`:
    where the current version holds each one's text (`_earlier_positions`).
    """
    passages, _ = read_shard(item.to_pylist()[0])
    positions = passages["position"].to_numpy()
    return passages.select(["position", "id", "content"]).append_column("earlier", pa.array(earlier[positions]))


def _write_record(target: str, record: dict[str, Any]) -> None:
    """Writes `build.json` into a version's folder (last: the version is complete with it)."""
    filesystem, inner = resolve_path(target)
    with filesystem.open_output_stream(f"{inner.rstrip('/')}/{BUILD_FILE}") as stream:
        stream.write(json.dumps(record, indent=2, sort_keys=True).encode("utf-8"))


# What the top of an index folder holds besides its shard's files where it has one shard.
_NOT_SHARD_FILES = {BUILD_FILE, STATISTICS_FILE, FREQUENCIES_FILE, VERSION_FILE, LOCK_FILE, "dense"}


def _link_shard(source: str, destination: str, at_top: bool) -> None:
    """
    A kept shard's files linked into the new version (hard links; copied in object storage): a shard at the top of
    its index (one shard) without the index's own files there.
    """
    filesystem, inner = resolve_path(source)
    _, target = resolve_path(destination)
    for entry in filesystem.get_file_info(pafs.FileSelector(inner, recursive=True)):
        relative = entry.path[len(inner.rstrip("/")) + 1 :]
        top = relative.split("/")[0]
        if entry.type != pafs.FileType.File or (at_top and (top in _NOT_SHARD_FILES or top.startswith(VERSION_PREFIX))):
            continue
        _link_file(filesystem, entry.path, f"{target.rstrip('/')}/{relative}")


def _link_dense_shard(source: str, destination: str, offset: int) -> None:
    """A dense shard's files linked at a new corpus position: its header written again with that `doc_offset`."""
    filesystem, inner = resolve_path(source)
    _, target = resolve_path(destination)
    for entry in filesystem.get_file_info(pafs.FileSelector(inner)):
        if entry.base_name != DENSE_HEADER_FILE:
            _link_file(filesystem, entry.path, f"{target.rstrip('/')}/{entry.base_name}")
    with filesystem.open_input_stream(f"{inner.rstrip('/')}/{DENSE_HEADER_FILE}") as stream:
        header = json.loads(stream.read().decode("utf-8"))
    with filesystem.open_output_stream(f"{target.rstrip('/')}/{DENSE_HEADER_FILE}") as stream:
        stream.write(json.dumps({**header, "doc_offset": offset}).encode("utf-8"))


def _link_file(filesystem: pafs.FileSystem, source: str, destination: str) -> None:
    """A file hard-linked to a new path (copied where the filesystem has no links: object storage)."""
    if isinstance(filesystem, pafs.LocalFileSystem):
        Path(destination).parent.mkdir(parents=True, exist_ok=True)
        os.link(source, destination)
    else:
        filesystem.copy_file(source, destination)


def _index_settings(record: dict[str, Any], settings: RetrievalSettings) -> RetrievalSettings:
    """The index's own BM25 settings and splitting, with shards of its size or fewer where the budget bounds them."""
    budget = RetrievalSettings(memory_budget=settings.memory_budget)
    size = min(record["shard_size"], bounded(budget, node_cpus()).index_shard_size)
    return RetrievalSettings(
        bm25_algorithm=record["algorithm"], bm25_parameters=record["parameters"], index_shard_size=size,
        split_length=record.get("split_length"), split_overlap=record.get("split_overlap", 0),
    )  # fmt: skip


def _read_ids(location: str, name: str) -> pa.Array:
    """An ids file (`index_io.write_doc_ids`'s) of a folder, local or remote, read whole."""
    filesystem, inner = resolve_path(location)
    with filesystem.open_input_file(f"{inner.rstrip('/')}/{name}") as file:
        return pa.ipc.open_file(file).read_all()["id"].combine_chunks()


def _read_array(location: str, name: str) -> np.ndarray:
    """A `.npy` array of a folder, local or remote, never unpickled."""
    filesystem, inner = resolve_path(location)
    with filesystem.open_input_file(f"{inner.rstrip('/')}/{name}") as file:
        return np.load(file, allow_pickle=False)


def _read_table(location: str, name: str) -> pa.Table:
    """An Arrow IPC file of a folder, local or remote, read whole."""
    filesystem, inner = resolve_path(location)
    with filesystem.open_input_file(f"{inner.rstrip('/')}/{name}") as file:
        return pa.ipc.open_file(file).read_all()
