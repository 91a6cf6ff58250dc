"""
The passages of a split index (`split_length`): the documents cut into passages of words before indexing, and
where each indexed passage lies in its source document. Each shard folder keeps, beside its index files:

- `passages.arrow`: each passage's source (its row in the shard's source documents) and its character range
  `[start, end)` there, in corpus order, in the smallest unsigned integer type that holds them (uncompressed Arrow
  IPC, memory-mapped: a retrieval actor reads the few rows it needs, nothing is turned into Python lists);
- `source_ids.arrow`: the ids of the shard's source documents, by row (`index_io.write_doc_ids`' file);
- `sources.arrow`: those documents themselves (`id`, `content`, and `page_number` and `file_path` where the
  documents have them), a passage store (`qa_core.retrieval.store`) read by row or by id: what a job over the
  index hands the reader (the passage's range of its document) and its result files' contexts, without reading
  the documents table.

A shard's source documents are those of its passages, in order; a document cut between two shards (or two parts
of one) is kept by both. An index of the earlier layout (`passages.json`) is refused with a rebuild message.
"""

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qa_core.document import Document
from qa_core.retrieval.index_io import DocIds, read_doc_ids, smallest_unsigned, write_doc_ids
from qa_core.retrieval.splitter import split_documents
from qa_core.retrieval.store import PassageStore, write_store

PASSAGES_FILE = "passages.arrow"
SOURCE_IDS_FILE = "source_ids.arrow"
SOURCES_FILE = "sources.arrow"
_EARLIER_FILE = "passages.json"  # the layout before `passages.arrow`: sources as JSON lists, no source store
_COLUMNS = ("source", "start", "end")


def passage_columns(sources: Iterable[int], starts: Iterable[int], ends: Iterable[int]) -> pa.Table:
    """Passages' `source` rows and ranges (int64), as `split_batch` gives them and `save_split` takes them."""
    return pa.table({name: pa.array(values, pa.int64()) for name, values in zip(_COLUMNS, (sources, starts, ends),
                                                                                 strict=True)})  # fmt: skip


def split_batch(
    ids: list[str], texts: list[str], split_length: int, split_overlap: int
) -> tuple[list[str], list[str], pa.Table]:
    """
    Documents split into passages of `split_length` words sharing `split_overlap` (Haystack's
    `DocumentSplitter(split_by="word")`, `qa_core.retrieval.split_documents`): the passages' ids (the ones
    Haystack gives), texts and sources. Documents with empty content make no passage, as in Haystack.

    :param ids: The documents' ids.
    :param texts: Their contents (none null).
    :returns: The passage ids, their texts and where they lie (`passage_columns`: `source`, each passage's
        document's index in `ids`, and its range there), documents in order.
    """
    documents = [Document(content=text, id=doc_id) for doc_id, text in zip(ids, texts, strict=True)]
    rows: list[int] = []
    passages: list[Document] = []
    for row, document in enumerate(documents):
        found = split_documents([document], split_length, split_overlap)
        passages += found
        rows += [row] * len(found)
    starts = [passage.meta["split_idx_start"] for passage in passages]
    ends = [start + len(passage.content) for start, passage in zip(starts, passages, strict=True)]
    return (
        [passage.id for passage in passages],
        [passage.content for passage in passages],
        passage_columns(rows, starts, ends),
    )


def check_source_ids(ids: pa.ChunkedArray | pa.Array) -> None:
    """
    Checks the ids of the documents split into an index's passages, each document once: non-empty strings, none
    twice (they are found by id in the index's source stores).

    :raises ValueError: Naming the first id that is null or empty, or that occurs twice.
    """
    invalid = pc.or_kleene(pc.is_null(ids), pc.equal(pc.utf8_length(ids), 0))
    if pc.any(invalid).as_py():
        raise ValueError(
            f"Document ids must be non-empty strings, not {ids.filter(pc.fill_null(invalid, True))[0].as_py()!r}."
        )
    counts = pc.value_counts(ids)  # in the order of their first occurrence
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    if len(repeated):
        raise ValueError(f"Document id {repeated.field('values')[0].as_py()!r} occurs more than once in the corpus.")


def split_window(
    passages: pa.Table, documents: pa.Table, start: int, stop: int, first_row: int = 0
) -> tuple[pa.Table, pa.Table]:
    """
    The passages `[start, stop)` of `passages` (a `source` column: rows of `documents`, in order) and their source
    documents, each once and only those (a document without passages is no source), the passages' `source` made
    their rows there counted from `first_row`.
    """
    window = passages.slice(start, stop - start)
    used, rows = np.unique(window["source"].to_numpy(), return_inverse=True)
    rebased = pa.array(rows.astype(np.int64) + first_row, pa.int64())
    return window.set_column(window.schema.get_field_index("source"), "source", rebased), documents.take(used)


def save_split(folder: Path, passages: pa.Table, documents: Iterable[pa.Table]) -> None:
    """
    Writes a shard's split passages into its folder: `passages.arrow`, and its source documents' ids and store.

    :param passages: `passage_columns` of its passages, in corpus order, `source` its rows of `documents`.
    :param documents: Its source documents (`id`, `content` and the store's document columns), in order, in tables
        of any sizes (read once).
    """
    ids: list[pa.Array] = []

    def kept(tables: Iterable[pa.Table]) -> Iterable[pa.Table]:
        for table in tables:
            ids.append(table["id"].combine_chunks().cast(pa.string()))
            yield table

    written = write_store(folder, kept(documents), SOURCES_FILE)
    id_array = pa.concat_arrays(ids) if ids else pa.array([], pa.string())
    write_doc_ids(folder / SOURCE_IDS_FILE, DocIds(id_array))
    sources = passages["source"].to_numpy()
    if sources.size and (sources.min() < 0 or sources.max() >= written):
        raise ValueError(f"{folder}: a passage's source lies outside its {written} source documents.")
    columns = [
        pa.array(values.astype(smallest_unsigned(values)))
        for values in (passages[name].to_numpy() for name in _COLUMNS)
    ]
    table = pa.Table.from_arrays(columns, names=list(_COLUMNS))
    with pa.OSFile(str(folder / PASSAGES_FILE), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


@dataclass(frozen=True, eq=False)
class Passages:
    """
    Where the passages of a split index's shard come from, memory-mapped from its folder: each passage's source
    row, range and the source documents' ids (`hit`), and the source documents' store (`sources`).
    """

    folder: Path
    rows: np.ndarray  # (passages,) each passage's source row
    starts: np.ndarray  # (passages,) its range's start in the source's content
    ends: np.ndarray
    source_ids: DocIds

    def __len__(self) -> int:
        return len(self.rows)

    def hit(self, index: int) -> tuple[str, int, int]:
        """The `index`-th passage's source document id and its character range there."""
        return self.source_ids[int(self.rows[index])], int(self.starts[index]), int(self.ends[index])

    def own_source_ids(self) -> pa.Array:
        """
        The ids of the shard's source documents but one that continues the previous shard's last document (where its
        first passage does not start its document): each document of an index once, shard after shard.
        """
        return self.source_ids.arrow()[int(len(self) > 0 and self.starts[0] > 0) :]

    def sources(self) -> PassageStore:
        """The store of the shard's source documents, by row (`take`) or id (`positions_of`)."""
        return PassageStore(self.folder, 0, SOURCES_FILE, SOURCE_IDS_FILE)

    @classmethod
    def load(cls, folder: Path) -> "Passages | None":
        """
        The passages of a shard folder; None when it has none (an index of whole documents).

        :raises ValueError: If the folder keeps them in the earlier layout (`passages.json`: rebuild the index), or
            its files are not `save_split`'s.
        """
        path = folder / PASSAGES_FILE
        if not path.exists():
            if (folder / _EARLIER_FILE).exists():
                raise ValueError(
                    f"{folder}: an index of split passages of an earlier version (its passages in {_EARLIER_FILE}, no "
                    "source store): rebuild it with `python -m jobs.index`."
                )
            return None
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        except (OSError, pa.ArrowInvalid) as error:
            raise ValueError(f"Cannot read {path}: {error}") from error
        if table.column_names != list(_COLUMNS) or any(
            not pa.types.is_unsigned_integer(column.type) or column.null_count for column in table.columns
        ):
            raise ValueError(f"{path} must hold the unsigned integer columns {', '.join(_COLUMNS)}, none null.")
        rows, starts, ends = (table[name].combine_chunks().to_numpy() for name in _COLUMNS)
        source_ids = read_doc_ids(folder, name=SOURCE_IDS_FILE)
        if rows.size and int(rows.max()) >= len(source_ids):
            raise ValueError(f"{path}: a passage's source lies outside the {len(source_ids)} of {SOURCE_IDS_FILE}.")
        return cls(folder, rows, starts, ends, source_ids)


class ShardPassages:
    """The passages of consecutive shards of a split index, found by corpus position (`hit`)."""

    def __init__(self, parts: list[Passages], offsets: list[int]) -> None:
        """
        :param parts: Each shard's passages, in corpus order.
        :param offsets: Each shard's first corpus position.
        """
        self.parts, self.offsets = parts, offsets

    def hit(self, position: int) -> tuple[str, int, int]:
        """The passage at a corpus position: its source document id and range there."""
        at = bisect_right(self.offsets, position) - 1
        return self.parts[at].hit(position - self.offsets[at])
