"""
The BM25 index of `numbered_passages` built by Ray Data, each passage tokenized once, the driver holding the corpus
statistics only:

1. count (`count_shards`): a Ray Data task per shard (`passage_shards`; per part of a shard where the shards are
   fewer than the CPUs) reads its passages itself (`read_shard`: no regrouping of blocks, a shard is counted as
   soon as it is read, and its texts never pass through the object store) and tokenizes them once, in parts of
   `counted.COUNT_PART_DOCS` passages whose compact counts it merges (so a task holds one part's tokens, not its
   shard's), writes its term counts and ids into its folder (`counted_folder`: `counted.CountedShard`, with its
   passage store, or when split where its passages lie and its source documents' store: `jobs.passages`) and
   returns only their statistics; the driver merges them in corpus order (`CorpusStatistics.merge`: the
   single-process build's vocabulary order, so the same idf sums) and checks that no id occurs twice in the corpus
   (from a 64-bit hash of each id that the tasks return);
2. weigh (`weigh_shards`): a task per shard weighs its stored counts (its parts' put together) with the corpus's
   statistics (`sharding.weigh_counted_shard`: counts are read, not texts) and writes the shard's index beside
   them.

No text is kept past the first pass, and none goes through the object store.
A corpus that grows goes the same way: the added passages are counted as new shards, and every shard, old and
new, is weighed with the merged statistics (an old shard's terms are in the corpus's order already: its counts
are read memory-mapped and only its idf, bounds and header written). An update (`jobs.indexing.update`) counts the
shards it writes again the same way, except that a task given the old shards that hold some of its passages
(`range_shards`' `earlier`) takes their counts from there (`qa_core.retrieval.recount`) and tokenizes the others.
"""

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs

from jobs.indexing.passages import read_shard
from jobs.passages import Passages, passage_columns, save_split
from jobs.storage import resolve_path, staged_copy
from qa_core.retrieval.counted import COUNT_PART_DOCS, CountedShard, count_parts
from qa_core.retrieval.fingerprint import fingerprint_hex, text_hashes
from qa_core.retrieval.index_io import DOC_IDS_FILE
from qa_core.retrieval.index_io import read_doc_ids as index_doc_ids
from qa_core.retrieval.recount import EarlierShard, recount_shard
from qa_core.retrieval.sharding import weigh_counted_shard
from qa_core.retrieval.statistics import CorpusStatistics
from qa_core.retrieval.store import STORE_FILE, PassageStore, write_store
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer

if TYPE_CHECKING:  # its module imports torch, which the tasks here do without (seconds per worker)
    from jobs.retrieval_settings import RetrievalSettings

# A shard's `id_hashes`, kept beside its counts: an addition checks its ids against the shard's without reading and
# hashing the shard's `doc_ids.arrow` again (at 10M passages, seconds of the driver's time).
ID_HASHES_FILE = "id_hashes.npy"
# What an update (`jobs.indexing.update`) reuses a shard from, kept beside its counts: the SHA-256 of each passage's
# text (`fingerprint.text_hashes`: the shard fingerprinted again at another corpus position without its texts), of
# each source document's content where the passages are split (whole documents: their passages' own), and the
# shard's own statistics (its vocabulary in order of first occurrence in the shard, as merging in corpus order
# needs it: the weighed shard's vocabulary is in the corpus's order).
TEXT_HASHES_FILE = "text_hashes.npy"
SOURCE_HASHES_FILE = "source_hashes.npy"
SHARD_STATISTICS = "shard_statistics"
# What a counting task returns for its shard, one row.
_COUNTED_SCHEMA = pa.schema(
    [
        ("shard", pa.int64()),
        ("part", pa.int64()),  # of the shard's `parts`
        ("parts", pa.int64()),
        ("first", pa.int64()),  # the part's first corpus position
        ("folder", pa.string()),  # where it was counted (`counted_folder`)
        ("vocabulary", pa.list_(pa.string())),
        ("doc_frequencies", pa.list_(pa.int64())),
        ("n_docs", pa.int64()),
        ("total_length", pa.int64()),
        ("fingerprint", pa.string()),
        ("id_hashes", pa.binary()),  # `id_hashes` of the shard's ids, uint64 bytes
        # Split passages: the ids of the part's source documents, in order, the first left out where it continues
        # the previous part's last (the part's first passage does not start its document); else null.
        ("source_ids", pa.list_(pa.string())),
        ("tokenized", pa.int64()),  # passages tokenized (the others' counts taken from an earlier index's shard)
        ("error", pa.string()),  # why the shard cannot be indexed (bad input), else null
    ]
)


@dataclass(frozen=True)
class CountedPassages:
    """
    What counting some passages as shards gives the driver.

    :param statistics: Their statistics, merged in corpus order.
    :param fingerprints: Each shard's fingerprint (hex), in order.
    :param parts: How many parts each shard was counted in, in order (1: counted whole).
    :param id_hashes: `(passages,)` uint64 `id_hashes` of their ids, in corpus order.
    :param folders: Each counted folder (a shard's, or a part's: `counted_folder`) and its first corpus position,
        in corpus order.
    :param source_ids: Split passages: the ids of their source documents, each document once, in corpus order.
    :param tokenized: How many of them were tokenized (the others' counts taken from an earlier index's shards).
    """

    statistics: CorpusStatistics
    fingerprints: list[str]
    parts: list[int]
    id_hashes: np.ndarray
    folders: list[tuple[str, int]]
    source_ids: pa.ChunkedArray | None
    tokenized: int

    @property
    def sources(self) -> int | None:
        """Split passages: how many source documents they come from; else None."""
        return None if self.source_ids is None else len(self.source_ids)


def count_shards(shards: Any, locations: list[str], split: bool) -> CountedPassages:
    """
    Counts passages shard by shard: a Ray Data task per shard (or part of a shard) reads it, writes its counted
    shard into its folder (`counted_folder`) and returns its statistics, merged in corpus order by the driver.

    :param shards: `passage_shards`' dataset.
    :param locations: The folders of the shards these passages make, in order.
    :param split: Whether the passages are split documents (each shard then keeps their sources and its source
        documents' store, `jobs.passages`; else its passage store, `qa_core.retrieval.store`).
    :returns: The passages' statistics, shard fingerprints and parts, id hashes, counted folders and source ids.
    :raises ValueError: If a shard's passages cannot be indexed (ids invalid, or one twice in the shard).
    """
    counted = _all_cores_at_once(shards).map_batches(
        _count_shard,
        batch_format="pyarrow",
        batch_size=1,  # one shard, or part
        fn_kwargs={"locations": locations, "tokenization_regex": DEFAULT_TOKENIZATION_REGEX, "split": split},
    )
    fingerprints: list[int] = []
    parts: list[int] = []
    hashes: list[np.ndarray] = []
    folders: list[tuple[str, int]] = []
    source_ids: list[pa.Array] = []
    tokenized: list[int] = []
    errors: list[str] = []

    def shards() -> Iterator[CorpusStatistics]:  # merged in corpus order as soon as the parts before have come
        waiting: dict[tuple[int, int], dict[str, Any]] = {}
        following = (0, 0)  # the (shard, part) merged next
        shard_parts: list[CorpusStatistics] = []  # the parts of the shard being merged
        for table in counted.iter_batches(batch_size=None, batch_format="pyarrow"):
            for row in table.to_pylist():
                if row["error"] is not None:
                    errors.append(row["error"])
                if errors:  # every task runs to its end before the driver raises
                    continue
                waiting[row["shard"], row["part"]] = row
                while (row := waiting.pop(following, None)) is not None:
                    if row["part"] == 0:
                        fingerprints.append(0)
                        parts.append(row["parts"])
                    fingerprints[-1] += int(row["fingerprint"], 16)  # a sum: the shard's is its parts'
                    hashes.append(np.frombuffer(row["id_hashes"], np.uint64))
                    folders.append((row["folder"], row["first"]))
                    source_ids.append(pa.array(row["source_ids"] or [], pa.string()))
                    tokenized.append(row["tokenized"])
                    last = row["part"] + 1 == row["parts"]
                    following = (row["shard"] + 1, 0) if last else (row["shard"], row["part"] + 1)
                    part = _statistics(row)
                    shard_parts.append(part)
                    if last:  # the shard's own statistics, for an update to reuse it (`SHARD_STATISTICS`)
                        own = CorpusStatistics.merge(shard_parts) if len(shard_parts) > 1 else shard_parts[0]
                        save_files(f"{locations[row['shard']].rstrip('/')}/{SHARD_STATISTICS}", own.save)
                        shard_parts.clear()
                    yield part
        if waiting and not errors:
            raise RuntimeError(f"Shards' parts {sorted(waiting)} were counted, but not {following}.")

    statistics = CorpusStatistics.merge(shards())
    if errors:
        raise ValueError(errors[0])
    return CountedPassages(
        statistics,
        [fingerprint_hex(fingerprint) for fingerprint in fingerprints],
        parts,
        np.concatenate(hashes) if hashes else np.zeros(0, np.uint64),
        folders,
        pa.chunked_array(source_ids, pa.string()) if split else None,
        sum(tokenized),
    )


def counted_folder(location: str, part: int, parts: int) -> str:
    """The folder a shard's part is counted into: the shard's own where it is counted whole (`parts` 1)."""
    return location if parts == 1 else f"{location.rstrip('/')}/part-{part:05d}"


def id_hashes(ids: list[str]) -> np.ndarray:
    """`(ids,)` uint64 hashes of the ids, the same in every process (pandas' SipHash with its fixed key)."""
    return pd.util.hash_array(np.asarray(ids, dtype=object)).astype(np.uint64, copy=False)


def shard_id_hashes(location: str) -> np.ndarray:
    """
    `id_hashes` of a written shard's document ids: its `ID_HASHES_FILE`, kept by the task that counted it, or (a
    shard without one) hashed from its `doc_ids.arrow`.
    """
    filesystem, inner = resolve_path(location)
    try:
        with filesystem.open_input_file(f"{inner.rstrip('/')}/{ID_HASHES_FILE}") as file:
            hashes = np.load(file, allow_pickle=False)
    except FileNotFoundError:
        return id_hashes(read_doc_ids(location))
    if hashes.dtype != np.uint64 or hashes.ndim != 1:
        raise ValueError(f"{location}/{ID_HASHES_FILE} must be a one-dimensional uint64 array.")
    return hashes


def read_doc_ids(location: str) -> list[str]:
    """The document ids of a shard folder (local or remote; a remote one's `DOC_IDS_FILE` read whole)."""
    filesystem, inner = resolve_path(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        return list(index_doc_ids(Path(inner)))
    with filesystem.open_input_file(f"{inner.rstrip('/')}/{DOC_IDS_FILE}") as file:
        return pa.ipc.open_file(file).read_all()["id"].to_pylist()


def check_unique_ids(hashes: np.ndarray, locations: list[str], offsets: list[int]) -> None:
    """
    Checks that no id occurs twice in the corpus, from the ids' hashes; a pair of equal hashes is confirmed (or
    dismissed, for a collision) from the shards' `doc_ids.arrow`.

    :param hashes: `(passages,)` `id_hashes` of the corpus's ids, in corpus order.
    :param locations: The folders holding their `doc_ids.arrow`: shards', or parts' (`counted_folder`).
    :param offsets: Their first corpus positions.
    :raises ValueError: Naming the first id found twice and its positions.
    """
    order = np.argsort(hashes, kind="stable")
    ordered = hashes[order]
    for later in np.flatnonzero(ordered[1:] == ordered[:-1]).tolist():
        first, second = (int(position) for position in order[later : later + 2])
        found = [_doc_id(position, locations, offsets) for position in (first, second)]
        if found[0] == found[1]:
            raise ValueError(
                f"Document id {found[0]!r} occurs more than once in the corpus (passages {first} and {second})."
            )


def _doc_id(position: int, locations: list[str], offsets: list[int]) -> str:
    """The id at a corpus position, read from its folder."""
    shard = int(np.searchsorted(offsets, position, side="right")) - 1
    return read_doc_ids(locations[shard])[position - offsets[shard]]


def _statistics(row: dict[str, Any]) -> CorpusStatistics:
    """The `CorpusStatistics` of a row of `_COUNTED_SCHEMA`."""
    return CorpusStatistics(
        vocabulary=row["vocabulary"],
        doc_frequencies=np.asarray(row["doc_frequencies"], np.int64),
        n_docs=row["n_docs"],
        total_length=row["total_length"],
        fingerprint=int(row["fingerprint"], 16),
    )


def _count_shard(rows: pa.Table, locations: list[str], tokenization_regex: str, split: bool) -> pa.Table:
    """
    A shard or part (a row of `passage_shards`) -> its counted shard written into its folder (`counted_folder`);
    its statistics, one row.
    """
    item = rows.to_pylist()[0]
    batch, sources = read_shard(item)
    first, stop = item["first"], item["stop"]
    positions = batch["position"].to_numpy()
    if positions.size != stop - first or positions[0] != first:
        raise ValueError(f"The passages read for positions {first} to {stop} are not those positions.")
    folder = counted_folder(locations[item["shard"]], item["part"], item["parts"])
    where = {"shard": [item["shard"]], "part": [item["part"]], "parts": [item["parts"]], "first": [first],
             "folder": [folder]}  # fmt: skip
    content_hashes = _hashed(batch["content"])
    tokenizer = Tokenizer(tokenization_regex)
    try:
        if item.get("earlier"):  # an update: the passages an earlier shard counted are not tokenized again
            with _earlier_shards(item["earlier"]) as earlier:
                recounted = recount_shard(batch["id"].to_pylist(), _Texts(batch["content"]), content_hashes, first,
                                          earlier, tokenizer)  # fmt: skip
            counted, statistics, tokenized = recounted.counted, recounted.statistics, recounted.tokenized
        else:  # a part's strings at a time
            parts = ((batch["id"][start : start + COUNT_PART_DOCS].to_pylist(),
                      batch["content"][start : start + COUNT_PART_DOCS].to_pylist())
                     for start in range(0, batch.num_rows, COUNT_PART_DOCS))  # fmt: skip
            counted, statistics = count_parts(parts, first, tokenizer)
            tokenized = batch.num_rows
    except ValueError as error:  # bad input: the driver raises it
        columns = {name: [None] for name in _COUNTED_SCHEMA.names}
        return pa.table({**columns, **where, "error": [str(error)]}, schema=_COUNTED_SCHEMA)
    hashes = id_hashes(counted.doc_ids)
    save_files(folder, lambda local: _save_counted(counted, content_hashes, batch, sources, hashes, local))
    row = {
        **where,
        "tokenized": [tokenized],
        "vocabulary": [statistics.vocabulary],
        "doc_frequencies": [statistics.doc_frequencies],
        "n_docs": [statistics.n_docs],
        "total_length": [statistics.total_length],
        "fingerprint": [statistics.fingerprint_hex],
        "id_hashes": [hashes.tobytes()],
        "source_ids": [None if sources is None else sources["id"][int(batch["start"][0].as_py() > 0) :].to_pylist()],
        "error": [None],
    }
    return pa.table(row, schema=_COUNTED_SCHEMA)


def _save_counted(
    counted: CountedShard,
    content_hashes: np.ndarray,
    passages: pa.Table,
    sources: pa.Table | None,
    hashes: np.ndarray,
    folder: Path,
) -> None:
    """
    A counted shard's files: its counts, its ids' and texts' hashes, and its passage store, or with `sources`
    (split passages) where its passages lie and its source documents' store.
    """
    counted.save(folder)
    np.save(folder / ID_HASHES_FILE, hashes, allow_pickle=False)  # the ids checked against a later addition's
    np.save(folder / TEXT_HASHES_FILE, content_hashes, allow_pickle=False)
    if sources is None:  # whole documents: their texts kept for the job to read
        write_store(folder, [passages])
    else:
        np.save(folder / SOURCE_HASHES_FILE, _hashed(sources["content"]), allow_pickle=False)
        save_split(folder, passages, [sources])


class _Texts(Sequence[str]):
    """A column of texts as a sequence of strings, each made only when it is read (a recount reads few)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    def __getitem__(self, at: Any) -> Any:
        return self._column[at].as_py()

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._column), COUNT_PART_DOCS):
            yield from self._column[start : start + COUNT_PART_DOCS].to_pylist()


@contextmanager
def _earlier_shards(locations: list[str]) -> Iterator[list[EarlierShard]]:
    """
    The shards of an earlier index at `locations`, as a recount reads them: memory-mapped where they are local,
    copied into a temporary folder first from object storage.
    """
    with ExitStack() as stack:
        shards = []
        for location in locations:
            filesystem, inner = resolve_path(location)
            local = isinstance(filesystem, pafs.LocalFileSystem)
            folder = Path(inner) if local else stack.enter_context(staged_copy(location, read=True, write=False))
            own = CorpusStatistics.load(folder / SHARD_STATISTICS)
            hashes = np.load(folder / TEXT_HASHES_FILE, mmap_mode="r" if local else None, allow_pickle=False)
            shards.append(EarlierShard(CountedShard.load(folder, mmap=local), hashes, own.vocabulary))
        yield shards


def _hashed(texts: pa.ChunkedArray) -> np.ndarray:
    """`fingerprint.text_hashes` of a column of texts, `COUNT_PART_DOCS` Python strings at a time."""
    parts = [text_hashes(texts[start : start + COUNT_PART_DOCS].to_pylist())
             for start in range(0, len(texts), COUNT_PART_DOCS)]  # fmt: skip
    return np.concatenate(parts) if parts else np.zeros((0, 32), np.uint8)


def weigh_shards(
    shards: list[tuple[str, int, str, int]], statistics: CorpusStatistics, settings: "RetrievalSettings"
) -> list[int]:
    """
    Weighs counted shards with their corpus's statistics (`sharding.weigh_counted_shard`, from their stored
    counts, without tokenizing), a Ray Data task per shard, each writing its shard's index into its folder; a
    shard counted in parts is first put together from them (`CountedShard.concatenate`), and the parts removed.

    :param shards: Each shard's folder, first corpus position, fingerprint (hex) and the parts it was counted in
        (`counted_folder`), in the order to start them.
    :param statistics: The corpus's statistics.
    :param settings: The algorithm and its parameters.
    :returns: Each shard's vocabulary size, in corpus order.
    :raises ValueError: If a shard's term is missing from the statistics.
    """
    import ray
    import ray.data

    algorithm, parameters = settings.bm25_algorithm, settings.parameters()
    weights = ray.put(statistics.weights(algorithm, parameters))
    items = [{"location": location, "doc_offset": offset, "fingerprint": fp, "parts": parts}
             for location, offset, fp, parts in shards]  # fmt: skip
    weighed = _all_cores_at_once(ray.data.from_items(items, override_num_blocks=len(items))).map_batches(
        _weigh,
        batch_size=1,
        fn_kwargs={"weights": weights, "algorithm": algorithm, "parameters": parameters},
    )
    return [row["terms"] for row in sorted(weighed.take_all(), key=lambda row: row["doc_offset"])]


def _weigh(batch: dict[str, Any], weights: Any, algorithm: str, parameters: dict[str, float]) -> dict[str, Any]:
    """One counted shard weighed and its index written into its folder (`sharding.weigh_counted_shard`)."""
    import ray

    location, offset, n_parts = str(batch["location"][0]), int(batch["doc_offset"][0]), int(batch["parts"][0])
    parts = [counted_folder(location, part, n_parts) for part in range(n_parts)] if n_parts > 1 else []

    def weigh(folder: Path) -> int:
        local_parts = [folder / Path(part).name for part in parts]
        if local_parts:
            _gather_parts(local_parts, folder)
        return weigh_counted_shard(folder, offset, str(batch["fingerprint"][0]), ray.get(weights), algorithm,
                                   parameters, DEFAULT_TOKENIZATION_REGEX, local_parts)  # fmt: skip

    terms = in_folder(location, weigh)
    for part in parts:  # after the shard's own files are written (and copied, to a remote folder)
        filesystem, inner = resolve_path(part)
        filesystem.delete_dir(inner)
    return {"doc_offset": [offset], "terms": [terms]}


def _gather_parts(parts: list[Path], folder: Path) -> None:
    """
    A shard's own files besides its counts (`_save_counted`'s: its ids' hashes, its store, its passages' sources),
    from its parts, their stores one after the other a batch at a time.
    """
    for name in (ID_HASHES_FILE, TEXT_HASHES_FILE):
        np.save(folder / name, np.concatenate([np.load(part / name, allow_pickle=False) for part in parts]),
                allow_pickle=False)  # fmt: skip
    if (parts[0] / STORE_FILE).exists():
        write_store(folder, (table for part in parts for table in PassageStore(part, 0).tables()))
        return
    passages = [Passages.load(part) for part in parts]
    rows, first_row = [], 0  # split: each part's source rows follow the earlier parts'
    shared = [index > 0 and part.starts[0] > 0 for index, part in enumerate(passages)]
    source_hashes = [np.load(part / SOURCE_HASHES_FILE, allow_pickle=False)[int(continued) :]
                     for part, continued in zip(parts, shared, strict=True)]  # fmt: skip
    np.save(folder / SOURCE_HASHES_FILE, np.concatenate(source_hashes), allow_pickle=False)
    for part, continued in zip(passages, shared, strict=True):
        rows.append(part.rows.astype(np.int64) + first_row - continued)
        first_row += len(part.source_ids) - continued
    where = passage_columns(np.concatenate(rows), *(np.concatenate([getattr(part, name) for part in passages])
                                                    for name in ("starts", "ends")))  # fmt: skip
    save_split(folder, where, _sources_once(passages, shared))


def _sources_once(parts: list[Passages], shared: list[bool]) -> Iterator[pa.Table]:
    """
    The source documents of a shard's parts, in order, each once: a part whose first passage does not start its
    document (`shared`) continues the previous part's last document, which it keeps too.
    """
    for part, continued in zip(parts, shared, strict=True):
        tables = part.sources().tables()
        if continued:
            yield next(tables).slice(1)
        yield from tables


def _all_cores_at_once(dataset: Any) -> Any:
    """
    The dataset with Ray Data's per-operator reservation of resources off (in its own context, shared by the
    datasets made from it): it reserves a share of the CPUs for each operator and launches the tasks beyond it
    one at a time about a second apart, which on 2 cores kept one idle for the first second of each pass (and at
    each task after). The passes here map one operator over a dataset of items, with nothing to reserve for.
    """
    dataset.context.op_resource_reservation_enabled = False
    return dataset


def save_files(location: str, save: Callable[[Path], None]) -> None:
    """Runs `save(folder)` into a folder at `location`, local or remote (written locally, then copied)."""
    in_folder(location, save, read=False)


def in_folder(location: str, work: Callable[[Path], Any], read: bool = True) -> Any:
    """
    Runs `work(folder)` on a folder at `location`, local or remote: a remote one is copied into a local folder
    first (with `read`), and the local folder copied back after.

    :returns: What `work` returns.
    """
    filesystem, inner = resolve_path(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        Path(inner).mkdir(parents=True, exist_ok=True)
        return work(Path(inner))
    with staged_copy(location, read=read) as local:
        local.mkdir(exist_ok=True)
        return work(local)
