"""
An index folder: JSON for the header and vocabulary, an Arrow IPC file for the ids, `.npy` for the arrays; all
memory-mapped for search, nothing ever unpickled.
"""

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa

# 4: postings as uint32 (below 2^32 documents in the index), ids in `doc_ids.arrow`; 3 (still read): postings as
# int64, ids in `doc_ids.json`. Both: fingerprints are sums of per-document hashes at corpus positions.
FORMAT = "qa_core.retrieval.bm25/4"
READ_FORMATS = (FORMAT, "qa_core.retrieval.bm25/3")
HEADER_FILE = "index.json"
VOCABULARY_FILE = "vocabulary.json"
DOC_IDS_FILE = "doc_ids.arrow"
JSON_DOC_IDS_FILE = "doc_ids.json"  # format 3's
_DOC_IDS_SCHEMA = pa.schema([("id", pa.string())])
# The arrays, the dtypes each may have (the first written, but for `doc_indices`: `posting_dtype`) and its number
# of dimensions.
ARRAY_SHAPES = {
    "starts": ((np.dtype(np.int64),), 1),
    "doc_indices": ((np.dtype(np.uint32), np.dtype(np.int64)), 1),
    "weights": ((np.dtype(np.float64),), 1),
    "dense_terms": ((np.dtype(np.int64),), 1),
    "dense_weights": ((np.dtype(np.float64),), 2),
}


def posting_dtype(n_docs: int) -> np.dtype:
    """The smallest dtype of the postings (document indices) of an index of `n_docs` documents: uint32 or int64."""
    return np.dtype(np.uint32) if n_docs <= 2**32 else np.dtype(np.int64)


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
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, _DOC_IDS_SCHEMA) as writer:
        writer.write_table(pa.table([array], schema=_DOC_IDS_SCHEMA))


def read_doc_ids(folder: Path, mmap: bool = True) -> Sequence[str]:
    """
    The document ids of an index folder: `doc_ids.arrow` (memory-mapped with `mmap`), or format 3's `doc_ids.json`.

    :raises ValueError: If neither is there, or the file is not a column of strings.
    """
    path = folder / DOC_IDS_FILE
    if not path.exists() and (folder / JSON_DOC_IDS_FILE).exists():
        ids = read_json(folder / JSON_DOC_IDS_FILE, list)
        if not all(isinstance(value, str) for value in ids):
            raise ValueError(f"{folder / JSON_DOC_IDS_FILE} must hold a list of strings.")
        return ids
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
    :param files: What to write; each array is converted to its `ARRAY_SHAPES` dtype.
    :param kept: Names of files the folder already holds with these very bytes (`VOCABULARY_FILE`,
        `DOC_IDS_FILE`, an array's `name.npy`), left as they are; the header is always written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name, (dtypes, _) in ARRAY_SHAPES.items():
        dtype = posting_dtype(len(files.doc_ids)) if name == "doc_indices" else dtypes[0]
        if f"{name}.npy" not in kept:
            np.save(directory / f"{name}.npy", np.ascontiguousarray(files.arrays[name], dtype), allow_pickle=False)
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
    :raises ValueError: If a file is missing or malformed, the format is not one of `READ_FORMATS` (an index saved
        by an earlier version must be built again: the message names its format), or an array has another dtype
        or number of dimensions (object arrays, which need pickle, included).
    """
    header = read_json(directory / HEADER_FILE, dict)
    found = header.pop("format", None)
    if found not in READ_FORMATS:
        raise ValueError(
            f"{directory / HEADER_FILE} is an index of format {found!r}, not one of {', '.join(READ_FORMATS)} (an "
            "index saved by another version of qa_core must be built again with `python -m jobs.index`)."
        )
    vocabulary = read_json(directory / VOCABULARY_FILE, list)
    if not all(isinstance(value, str) for value in vocabulary):
        raise ValueError(f"{directory / VOCABULARY_FILE} must hold a list of strings.")
    doc_ids = read_doc_ids(directory, mmap)
    arrays = {name: read_array(directory / f"{name}.npy", *shape, mmap) for name, shape in ARRAY_SHAPES.items()}
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
    """Writes a JSON file (UTF-8, non-ASCII characters as they are)."""
    with path.open("w", encoding="utf-8") as file:
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
