"""An index folder: JSON for the header, vocabulary and ids, `.npy` for the arrays; nothing is ever unpickled."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# 3: fingerprints are sums of per-document hashes at corpus positions (`fingerprint.py`), shards adding up.
FORMAT = "qa_core.retrieval.bm25/3"
HEADER_FILE = "index.json"
VOCABULARY_FILE = "vocabulary.json"
DOC_IDS_FILE = "doc_ids.json"
# The arrays, and the dtype and number of dimensions each must have.
ARRAY_SHAPES = {
    "starts": (np.dtype(np.int64), 1),
    "doc_indices": (np.dtype(np.int64), 1),
    "weights": (np.dtype(np.float64), 1),
    "dense_terms": (np.dtype(np.int64), 1),
    "dense_weights": (np.dtype(np.float64), 2),
}


@dataclass
class IndexFiles:
    """
    The contents of an index folder.

    :param header: Parameters and statistics (`index.json`), without its `format` entry.
    :param vocabulary: The terms, by term id.
    :param doc_ids: The document ids, by document index.
    :param arrays: `ARRAY_SHAPES`' arrays, memory-mapped or in memory.
    """

    header: dict[str, Any]
    vocabulary: list[str]
    doc_ids: list[str]
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
    for name, (dtype, _) in ARRAY_SHAPES.items():
        if f"{name}.npy" not in kept:
            np.save(directory / f"{name}.npy", np.ascontiguousarray(files.arrays[name], dtype), allow_pickle=False)
    for name, values in ((VOCABULARY_FILE, files.vocabulary), (DOC_IDS_FILE, files.doc_ids)):
        if name not in kept:
            write_json(directory / name, values)
    write_json(directory / HEADER_FILE, {"format": FORMAT, **files.header})  # last: a complete folder has it


def read_index_files(directory: Path, mmap: bool) -> IndexFiles:
    """
    Reads an index folder written by `write_index_files`.

    :param directory: The folder.
    :param mmap: Memory-map the arrays read-only instead of reading them.
    :returns: Its contents.
    :raises ValueError: If a file is missing or malformed, the format is another (an index saved by an earlier
        version must be built again), or an array has another dtype or number of dimensions (object arrays,
        which need pickle, included).
    """
    header = read_json(directory / HEADER_FILE, dict)
    if header.pop("format", None) != FORMAT:
        raise ValueError(
            f"{directory / HEADER_FILE} is not a {FORMAT} index header (an index saved by another version of "
            "qa_core must be built again)."
        )
    vocabulary = read_json(directory / VOCABULARY_FILE, list)
    doc_ids = read_json(directory / DOC_IDS_FILE, list)
    for name, values in ((VOCABULARY_FILE, vocabulary), (DOC_IDS_FILE, doc_ids)):
        if not all(isinstance(value, str) for value in values):
            raise ValueError(f"{directory / name} must hold a list of strings.")
    arrays = {name: read_array(directory / f"{name}.npy", *shape, mmap) for name, shape in ARRAY_SHAPES.items()}
    return IndexFiles(header=header, vocabulary=vocabulary, doc_ids=doc_ids, arrays=arrays)


def read_array(path: Path, dtype: np.dtype, ndim: int, mmap: bool) -> np.ndarray:
    """
    A `.npy` array of a dtype and number of dimensions, never unpickled (memory-mapped read-only with `mmap`).

    :raises ValueError: If it is missing, malformed or another dtype or number of dimensions.
    """
    try:
        array = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
    except (OSError, ValueError) as error:  # ValueError: an object array, which only pickle could load
        raise ValueError(f"Cannot load {path} as a plain array: {error}") from error
    if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != ndim:
        raise ValueError(f"{path} must be a {ndim}-dimensional {dtype} array.")
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
