"""
Checks an index folder given to a run (`--index`) against the run's settings and documents, before any work.
"""

from typing import Any

from jobs.indexing.documents import indexed_texts
from jobs.indexing.record import (
    BUILD_FILE,
    dense_format,
    earlier_split,
    read_json,
    shard_locations,
    split_record,
    summary,
)
from jobs.indexing.vectors import model_fingerprint
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, redact
from jobs.tables import input_fingerprint
from qa_core.retrieval.dense import FORMAT as DENSE_FORMAT
from qa_core.retrieval.fingerprint import fingerprint_hex, fingerprint_value
from qa_core.retrieval.index_io import HEADER_FILE
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX


def check_given_index(settings: RetrievalSettings, documents: str) -> dict[str, Any]:
    """
    Checks an `--index` folder against the run: built with the run's algorithm, parameters and splitting, and
    from `--documents`. Cheap when the documents' files are the ones it was built from (same paths, sizes and
    modification times, recorded in `build.json`); otherwise the documents are read once (and split) and
    fingerprinted (ids and contents, in order), which also accepts an unchanged copy.

    :returns: The index's build record.
    :raises InputError: If the folder is not a complete index, or was built otherwise or from other documents.
    """
    shown = redact(settings.index)
    record = read_json(settings.index, BUILD_FILE)
    shards = record.get("shards", 1) if isinstance(record, dict) else 1
    header = read_json(shard_locations(settings.index, shards)[0], HEADER_FILE)
    if not isinstance(record, dict) or not isinstance(header, dict):
        raise InputError(
            f"--index {shown}: not a complete index folder (no {BUILD_FILE} or {HEADER_FILE}); build one with "
            "`python -m jobs.index --documents D --output DIR`."
        )
    if header.get("tokenization_regex") != DEFAULT_TOKENIZATION_REGEX:
        raise InputError(
            f"--index {shown} was built with the tokenization regex {header.get('tokenization_regex')!r}, not "
            f"this version's {DEFAULT_TOKENIZATION_REGEX!r}: rebuild it with `python -m jobs.index`."
        )
    built_with = (header.get("algorithm"), header.get("parameters"))
    wanted = (settings.bm25_algorithm, settings.parameters())
    if built_with != wanted:
        raise InputError(
            f"--index {shown} was built with {built_with[0]} {built_with[1]}, not this run's bm25_algorithm "
            f"{wanted[0]} and bm25_parameters {wanted[1]}: rebuild it or pass the settings it was built with."
        )
    split = {"split_length": record.get("split_length"), "split_overlap": record.get("split_overlap", 0)}
    if split != split_record(settings):
        built_split = ", ".join(f"{key} {value}" for key, value in split.items())
        raise InputError(
            f"--index {shown} was built with {built_split}, not this run's split_length {settings.split_length} "
            f"and split_overlap {settings.split_overlap}: rebuild it or pass the settings it was built with."
        )
    check_split_layout(settings.index, record)
    if header.get("doc_offset") != 0 or header.get("corpus", {}).get("n_docs") != record.get("documents"):
        raise InputError(f"--index {shown}: its first shard's corpus does not match its {BUILD_FILE}.")
    for part in settings.method.added_parts:
        PART_CHECKS[part](settings.index, record, settings)
    if record.get("documents_files") != input_fingerprint(documents):
        total, position = 0, 0
        for batch_ids, batch_texts, _ in indexed_texts(documents, settings):
            total += fingerprint_value(batch_ids, batch_texts, position)
            position += len(batch_ids)
        if fingerprint_hex(total) != header.get("corpus", {}).get("fingerprint"):
            raise InputError(
                f"--index {shown} was built from other documents than --documents {redact(documents)} (their ids "
                "and contents differ from the index's fingerprint): rebuild it with `python -m jobs.index`."
            )
    return summary(record)


def check_split_layout(location: str, record: dict[str, Any]) -> None:
    """
    :raises InputError: If an index of split passages keeps them in the earlier layout (`passages.json`, no store
        of their source documents: `jobs.passages`).
    """
    if earlier_split(record):
        raise InputError(
            f"--index {redact(location)}: an index of split passages built by an earlier version (no store of their "
            "source documents): rebuild it with `python -m jobs.index`."
        )


def _check_dense(location: str, record: dict[str, Any], settings: RetrievalSettings) -> None:
    """
    :raises InputError: If an `--index` holds no vectors, or those of another embedding model, or of an earlier
        format.
    """
    shown, dense = redact(location), record.get("dense")
    if not isinstance(dense, dict):
        raise InputError(
            f"--index {shown} holds no dense vectors (built for BM25 only): rebuild it with `python -m jobs.index "
            f"--retrieval {settings.retrieval} --embedding-model {redact(settings.embedding_model)}`."
        )
    if dense.get("fingerprint") != model_fingerprint(settings):
        raise InputError(
            f"--index {shown} holds the vectors of embedding model {redact(str(dense.get('model')))}, not of this "
            f"run's --embedding-model {redact(settings.embedding_model)} (their files' fingerprints differ): rebuild "
            "it or pass the model it was built with."
        )
    found = dense_format(location, dense)
    if found != DENSE_FORMAT:
        raise InputError(
            f"--index {shown} holds dense shards of format {found}, not this version's {DENSE_FORMAT}: rebuild it "
            "with `python -m jobs.index`."
        )


# Each index part a retrieval method may need beyond the BM25 part, by name: checks a given index's part.
PART_CHECKS = {"dense": _check_dense}
