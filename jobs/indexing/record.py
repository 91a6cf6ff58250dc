"""
An index folder's layout and its build record (`build.json`, written last: a folder without it is incomplete).

An index folder is `qa_core.retrieval.BM25Index.save`'s (`.npy` arrays, Arrow and JSON files, never unpickled), or with
more than one shard one such folder per shard (`shard-00000/`, ...: contiguous ranges of `shard_size` corpus
positions weighed with the whole corpus's statistics), plus `build.json`: what it was built from (the documents'
files and fingerprint) and how (algorithm, parameters, shards and their size, vocabulary size, build seconds,
splitting). Each shard folder holds its documents' ids and texts, and their `page_number` and `file_path` where they
have them (`store.arrow`, `qa_core.retrieval.store`; `build.json` names those kept in `store_document_columns`);
with `split_length` the index holds passages of the documents, and each shard folder holds where each passage lies
in its source document and those documents in a store of their own instead (`jobs.passages`). For dense and hybrid
retrieval the folder also holds the passages' vectors (`dense/`, `jobs.indexing.vectors`) and `build.json` a
`dense` section.
"""

import hashlib
import json
import time
from typing import Any

from jobs.retrieval_settings import RetrievalSettings
from jobs.indexing.versions import current_version
from jobs.storage import parquet_dataset, read_json, resolve_path
from jobs.tables import input_fingerprint
from qa_core.retrieval.dense import DENSE_HEADER_FILE
from qa_core.retrieval.store import STORED_DOCUMENT_FIELDS
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX

BUILD_FILE = "build.json"  # written last into an index folder: a folder without it is incomplete
# The documents' columns that passage stores keep besides ids and texts, where the documents have them; and the
# key of `build.json` that names those an index's stores keep.
STORED_COLUMNS = [field.name for field in STORED_DOCUMENT_FIELDS]
STORE_COLUMNS_KEY = "store_document_columns"


def shard_locations(location: str, shards: int) -> list[str]:
    """The shard folders of an index folder with `shards` shards."""
    if shards == 1:
        return [location]
    return [f"{location.rstrip('/')}/shard-{shard:05d}" for shard in range(shards)]


def index_fingerprint(location: str) -> str | None:
    """
    An index folder's fingerprint: the SHA-256 of its build record (`build.json`, rewritten by every build, growth
    and update), as canonical JSON, of the version it points to (`versions.current_version`); None for a folder
    without one.
    """
    record = read_json(current_version(location), BUILD_FILE)
    if record is None:
        return None
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode("utf-8")).hexdigest()


def build_record(
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
        **split_record(settings),
    }
    if settings.split_length is not None:
        record["source_documents"] = n_sources  # "documents" counts the passages
    return record


def split_record(settings: RetrievalSettings) -> dict[str, Any]:
    """How the documents were split for indexing, as the build record holds it."""
    return {"split_length": settings.split_length, "split_overlap": settings.split_overlap}


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """A build record as the manifest shows it (without the documents' files and the default tokenization regex)."""
    return {key: value for key, value in record.items() if key not in ("documents_files", "tokenization_regex")}


def earlier_split(record: dict[str, Any]) -> bool:
    """Whether a build record is an index of split passages of the earlier layout (`passages.json`, no stores)."""
    return record.get("split_length") is not None and not record.get("store")


def stored_columns(documents: str) -> list[str]:
    """The documents' columns that the passage stores of an index of them keep besides ids and texts."""
    names = parquet_dataset(documents).schema.names
    return [name for name in STORED_COLUMNS if name in names]


def write_dense_record(location: str, dense: dict[str, Any]) -> None:
    """Writes `dense` as the `dense` section of the `build.json` at `location`."""
    write_record_section(location, "dense", dense)


def write_record_section(location: str, key: str, section: Any) -> None:
    """Writes `section` as the `key` section of the `build.json` at `location` (an index part added once built)."""
    record = read_json(location, BUILD_FILE)
    filesystem, inner = resolve_path(location)
    with filesystem.open_output_stream(f"{inner.rstrip('/')}/{BUILD_FILE}") as stream:
        stream.write(json.dumps({**record, key: section}, indent=2, sort_keys=True).encode("utf-8"))


def dense_format(location: str, dense: dict[str, Any]) -> str | None:
    """The format of the index's first dense shard (`dense.json`'s), or None where it has none."""
    shards = dense.get("shards") or [{}]
    header = read_json(f"{location.rstrip('/')}/{shards[0].get('folder')}", DENSE_HEADER_FILE)
    return header.get("format") if isinstance(header, dict) else None
