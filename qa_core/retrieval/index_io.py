"""
An index folder: JSON for the header and vocabulary, an Arrow IPC file for the ids, `.npy` for the arrays; all
memory-mapped for search, nothing ever unpickled.
"""

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa

# 5: the weights computed at search time from each posting's term count and its document's length (`pair_weights`);
# postings as uint32 below 2^32 documents, counts and lengths in the smallest unsigned type that holds them, ids in
# `doc_ids.arrow`. An index of format 3 or 4 (stored float64 weights) must be built again.
FORMAT = "qa_core.retrieval.bm25/5"
HEADER_FILE = "index.json"
VOCABULARY_FILE = "vocabulary.json"
DOC_IDS_FILE = "doc_ids.arrow"
_DOC_IDS_SCHEMA = pa.schema([("id", pa.string())])
_UNSIGNED = tuple(np.dtype(kind) for kind in (np.uint8, np.uint16, np.uint32, np.uint64))
# The arrays, the dtypes each may have (written as `array_dtype` chooses) and its number of dimensions. The first
# four are what counting a shard gives (`counted.CountedShard`); `idf` and `bounds` what weighing it adds.
ARRAY_SHAPES = {
    "starts": ((np.dtype(np.int64),), 1),
    "doc_indices": ((np.dtype(np.uint32), np.dtype(np.int64)), 1),
    "term_counts": (_UNSIGNED, 1),
    "doc_lengths": (_UNSIGNED, 1),
    "idf": ((np.dtype(np.float64),), 1),
    "bounds": ((np.dtype(np.float64),), 1),
}
COUNTED_ARRAYS = ("starts", "doc_indices", "term_counts", "doc_lengths")


def posting_dtype(n_docs: int) -> np.dtype:
    """The smallest dtype of the postings (document indices) of an index of `n_docs` documents: uint32 or int64."""
    return np.dtype(np.uint32) if n_docs <= 2**32 else np.dtype(np.int64)


def array_dtype(name: str, values: np.ndarray, n_docs: int) -> np.dtype:
    """
    The dtype an index array is written in: postings by `posting_dtype`, term counts and document lengths in the
    smallest unsigned type that holds their largest value (uint8 for passages), the others as `ARRAY_SHAPES` says.
    """
    if name == "doc_indices":
        return posting_dtype(n_docs)
    if name in ("term_counts", "doc_lengths"):
        return smallest_unsigned(values)
    return ARRAY_SHAPES[name][0][0]


def smallest_unsigned(values: np.ndarray) -> np.dtype:
    """The smallest unsigned dtype that holds these values (none negative; uint8 for none)."""
    return np.min_scalar_type(max(1, int(np.max(values, initial=0))))


def write_array(folder: Path, name: str, values: np.ndarray, n_docs: int) -> None:
    """Writes an index array as `name.npy` in its `array_dtype` (never pickled)."""
    dtype = array_dtype(name, values, n_docs)
    with replaced(folder / f"{name}.npy") as partial, partial.open("wb") as file:
        np.save(file, np.ascontiguousarray(values, dtype), allow_pickle=False)


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """
    Where to write the file `path`, renamed over it once written: an index's files are replaced, never written over
    in place, so that a shard folder may share its files with an earlier version of its index by hard links (an
    update weighs such a shard again: `jobs.indexing.update`) and a memory-mapped file stays as it was.
    """
    partial = path.with_name(f".{path.name}.partial")
    yield partial
    os.replace(partial, path)


def read_arrays(folder: Path, names: tuple[str, ...], mmap: bool) -> dict[str, np.ndarray]:
    """The `ARRAY_SHAPES` arrays `names` of an index folder (`read_array`)."""
    return {name: read_array(folder / f"{name}.npy", *ARRAY_SHAPES[name], mmap) for name in names}


class DocIds(Sequence[str]):
    """An index's document ids as an Arrow string array (memory-mapped from `doc_ids.arrow`), read id by id."""

    def __init__(self, ids: pa.Array) -> None:
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return self._ids[index].to_pylist()
        return self._ids[index].as_py()

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids.to_pylist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def arrow(self) -> pa.Array:
        """The ids as an Arrow array."""
        return self._ids


def write_doc_ids(path: Path, ids: Sequence[str]) -> None:
    """Writes document ids as an uncompressed Arrow IPC file of one `id` column (`DOC_IDS_FILE`)."""
    array = ids.arrow() if isinstance(ids, DocIds) else pa.array(list(ids), pa.string())
    with replaced(path) as partial:
        with pa.OSFile(str(partial), "wb") as sink, pa.ipc.new_file(sink, _DOC_IDS_SCHEMA) as writer:
            writer.write_table(pa.table([array], schema=_DOC_IDS_SCHEMA))


def read_doc_ids(folder: Path, mmap: bool = True, name: str = DOC_IDS_FILE) -> DocIds:
    """
    The document ids of an index folder: `doc_ids.arrow` (or another file `write_doc_ids` wrote, `name`),
    memory-mapped with `mmap`.

    :raises ValueError: If it is missing, or not a column of strings.
    """
    path = folder / name
    try:
        source = pa.memory_map(str(path), "r") if mmap else pa.OSFile(str(path), "rb")
        table = pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowInvalid) as error:
        raise ValueError(f"Cannot read {path}: {error}") from error
    if not table.schema.equals(_DOC_IDS_SCHEMA) or table["id"].null_count:
        raise ValueError(f"{path} must hold one column `id` of strings, none null.")
    return DocIds(table["id"].combine_chunks())


@dataclass
class IndexFiles:
    """
    The contents of an index folder.

    :param header: Parameters and statistics (`index.json`), without its `format` entry.
    :param vocabulary: The terms, by term id.
    :param doc_ids: The document ids, by document index (a list, or `DocIds` as read).
    :param arrays: `ARRAY_SHAPES`' arrays, memory-mapped or in memory.
    """

    header: dict[str, Any]
    vocabulary: list[str]
    doc_ids: Sequence[str]
    arrays: dict[str, np.ndarray]


def write_index_files(directory: Path, files: IndexFiles, kept: frozenset[str] = frozenset()) -> None:
    """
    Writes an index folder, creating the directory if needed.

    :param directory: The folder.
    :param files: What to write; each array is converted to its `array_dtype`.
    :param kept: Names of files the folder already holds with these very bytes (`VOCABULARY_FILE`,
        `DOC_IDS_FILE`, an array's `name.npy`), left as they are; the header is always written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in ARRAY_SHAPES:
        if f"{name}.npy" not in kept:
            write_array(directory, name, files.arrays[name], len(files.doc_ids))
    if VOCABULARY_FILE not in kept:
        write_json(directory / VOCABULARY_FILE, files.vocabulary)
    if DOC_IDS_FILE not in kept:
        write_doc_ids(directory / DOC_IDS_FILE, files.doc_ids)
    write_json(directory / HEADER_FILE, {"format": FORMAT, **files.header})  # last: a complete folder has it


def read_index_files(directory: Path, mmap: bool) -> IndexFiles:
    """
    Reads an index folder written by `write_index_files`.

    :param directory: The folder.
    :param mmap: Memory-map the arrays read-only instead of reading them.
    :returns: Its contents.
    :raises ValueError: If a file is missing or malformed, the format is not `FORMAT` (an index saved
        by an earlier version must be built again: the message names its format), or an array has another dtype
        or number of dimensions (object arrays, which need pickle, included).
    """
    header = read_json(directory / HEADER_FILE, dict)
    found = header.pop("format", None)
    if found != FORMAT:
        raise ValueError(
            f"{directory / HEADER_FILE} is an index of format {found!r}, not {FORMAT} (an index saved by another "
            "version of qa_core must be built again with `python -m jobs.index`)."
        )
    vocabulary = read_json(directory / VOCABULARY_FILE, list)
    if not all(isinstance(value, str) for value in vocabulary):
        raise ValueError(f"{directory / VOCABULARY_FILE} must hold a list of strings.")
    doc_ids = read_doc_ids(directory, mmap)
    arrays = read_arrays(directory, tuple(ARRAY_SHAPES), mmap)
    return IndexFiles(header=header, vocabulary=vocabulary, doc_ids=doc_ids, arrays=arrays)


def read_array(path: Path, dtypes: np.dtype | tuple[np.dtype, ...], ndim: int, mmap: bool) -> np.ndarray:
    """
    A `.npy` array of a dtype (one of `dtypes`) and number of dimensions, never unpickled (memory-mapped read-only
    with `mmap`).

    :raises ValueError: If it is missing, malformed or another dtype or number of dimensions.
    """
    dtypes = dtypes if isinstance(dtypes, tuple) else (dtypes,)
    try:
        array = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (OSError, ValueError) as error:  # ValueError: an object array, which only pickle could load
        raise ValueError(f"Cannot load {path} as a plain array: {error}") from error
    if not isinstance(array, np.ndarray) or array.dtype not in dtypes or array.ndim != ndim:
        raise ValueError(f"{path} must be a {ndim}-dimensional {' or '.join(map(str, dtypes))} array.")
    return array


def write_json(path: Path, value: Any) -> None:
    """Writes a JSON file (UTF-8, non-ASCII characters as they are), replacing the one there (`replaced`)."""
    with replaced(path) as partial, partial.open("w", encoding="utf-8") as file:
        json.dump(value, file, ensure_ascii=False)


def read_json(path: Path, kind: type) -> Any:
    """
    A JSON file's value, of a type (`list`, `dict`).

    :raises ValueError: If it is missing, malformed or of another type.
    """
    try:
        with path.open(encoding="utf-8") as file:
            value = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path}: {error}") from error
    if not isinstance(value, kind):
        raise ValueError(f"{path} must hold a JSON {kind.__name__}.")
    return value
