"""
The metadata fields an index keeps for filtering, added once its BM25 shards are written: each shard's
`filter_fields.arrow` (`qa_core.retrieval.filter_fields`) holds, for each of its passages in corpus order, the
metadata of its document (a split passage: of its source document), and `build.json` names the fields kept
(`FILTER_FIELDS_KEY`). Which fields: `--filter-fields`, by default every scalar metadata field of the documents
(`jobs.metadata.metadata_fields`). The driver reads the documents' ids and metadata columns once, never their texts;
a filtered search then reads the shards' files only, no documents table.
"""

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.indexing.bm25 import in_folder
from jobs.indexing.record import shard_locations, write_record_section
from jobs.metadata import metadata_columns, metadata_fields, read_metadata
from jobs.passages import Passages
from jobs.storage import InputError, parquet_dataset, redact
from qa_core.retrieval.filter_fields import FILTER_FIELDS_FILE, read_filter_fields, write_filter_fields
from qa_core.retrieval.filters import META_PREFIX
from qa_core.retrieval.index_io import read_doc_ids

FILTER_FIELDS_KEY = "filter_fields"  # the key of `build.json` naming the fields kept, in their order


def chosen_fields(documents: str, fields: list[str] | None) -> tuple[list[str], dict[str, Any], pa.Array]:
    """
    The fields to keep (`fields`, or every scalar metadata field of the documents), their values by
    `meta.<name>` and the documents' ids, read from the documents table (ids and metadata, not texts).

    :raises InputError: For a field named in `fields` that the documents do not hold as scalar metadata.
    """
    names = [name for name in parquet_dataset(documents).schema.names if name not in ("id", "content")]
    table = read_metadata(documents, names)
    held = metadata_fields(table)
    unknown = [field for field in fields or () if field not in held]
    if unknown:
        raise InputError(
            f"--filter-fields: {redact(documents)}: the documents have no scalar metadata field '{unknown[0]}' (they "
            f"have: {', '.join(held) or 'none'})."
        )
    chosen = held if fields is None else fields
    return chosen, metadata_columns(table, chosen), table["id"].cast(pa.string()).combine_chunks()


def add_filter_fields(location: str, record: dict[str, Any], documents: str, fields: list[str] | None) -> list[str]:
    """
    Writes the filter fields of every shard of the index at `location` (build record `record`) from its documents
    table, then names them in its `build.json`.

    :returns: The fields kept.
    :raises InputError: For a field of `fields` that the documents do not hold.
    """
    fields, columns, ids = chosen_fields(documents, fields)
    kept = pa.table({name[len(META_PREFIX) :]: column for name, column in columns.items()})
    for shard in shard_locations(location, record.get("shards", 1)) if fields else []:
        in_folder(shard, lambda folder: _write_shard_fields(folder, kept, ids))
    write_record_section(location, FILTER_FIELDS_KEY, fields)
    return fields


def _write_shard_fields(folder: Path, kept: pa.Table, ids: pa.Array) -> None:
    """A shard's `filter_fields.arrow`: the rows of `kept` (a document each, as `ids`) of its passages' documents."""
    passages = Passages.load(folder)
    sources = read_doc_ids(folder).arrow() if passages is None else passages.source_ids.arrow().take(passages.rows)
    rows = pc.index_in(sources, value_set=ids)
    write_filter_fields(folder, kept.take(rows))


def held_fields(record: dict[str, Any]) -> list[str]:
    """The fields an index keeps for filtering, as `meta.<name>` (none for an index built without them)."""
    return [META_PREFIX + name for name in record.get(FILTER_FIELDS_KEY, [])]


def shard_filter_columns(folder: Path) -> dict[str, pa.ChunkedArray]:
    """A shard's filter fields (`read_filter_fields`, memory-mapped); none for a shard kept without them."""
    return read_filter_fields(folder) if (folder / FILTER_FIELDS_FILE).exists() else {}
