"""
A documents table's metadata, as metadata filters read it (`qa_core.retrieval.filters`): every column but `id` and
`content`, addressed as `meta.<name>` as Haystack's `Document.meta`, plus, for a folder corpus converted by
`jobs.ingest`, the keys of its `meta` column (a JSON object per document: a converter's own keys, a row's other
columns) that no column of the same name gives. Scalar fields only (numbers, booleans, strings, dates): those the
index keeps for filtering (`--filter-fields`, `jobs.indexing.filter_fields`) and those `--every-document` filters its
documents on.

Usage example:
```python
table = pa.table({"id": ["a"], "content": ["x"], "year": [2020], "meta": ['{"author": "Ann", "tags": ["t"]}']})
assert metadata_fields(table) == ["year", "author"]
columns = metadata_columns(table, ["year", "author"])  # {"meta.year": ..., "meta.author": ...}
```
"""

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.storage import parquet_dataset
from qa_core.retrieval.filter_fields import scalar_fields
from qa_core.retrieval.filters import META_PREFIX, FilterError

META_COLUMN = "meta"  # a folder corpus's whole meta as JSON (`jobs.ingest.stage.DOCUMENTS_SCHEMA`)


def has_meta_json(schema: pa.Schema) -> bool:
    """Whether a documents table's `meta` column holds each document's meta as a JSON object (a string column)."""
    return META_COLUMN in schema.names and pa.types.is_string(schema.field(META_COLUMN).type)


def metadata_fields(table: pa.Table) -> list[str]:
    """
    The scalar metadata fields of documents (the default of `--filter-fields`): the scalar columns but `id`,
    `content` and a JSON `meta` (`scalar_fields`), then the keys of the JSON `meta` whose values are all scalars of
    one kind (or null) that no column gives, in order of first appearance.
    """
    columns = [
        name for name in scalar_fields(table.schema) if not (name == META_COLUMN and has_meta_json(table.schema))
    ]
    if not has_meta_json(table.schema):
        return columns
    keys = [key for key in _meta_values(table) if key not in table.schema.names]
    return columns + [key for key, values in _meta_values(table, keys).items() if _scalar_array(values) is not None]


def metadata_columns(table: pa.Table, fields: Sequence[str]) -> dict[str, pa.Array | pa.ChunkedArray]:
    """
    The `fields` of documents as `filters.matching_mask` reads them (`meta.<name>`: a column, else the key of the
    JSON `meta`), one value per row of `table`.

    :raises FilterError: For a field that is neither a column nor a key of the JSON `meta` with scalar values of one
        kind, naming it and the fields the documents have.
    """
    found: dict[str, pa.Array | pa.ChunkedArray] = {}
    from_meta = [field for field in fields if field not in table.schema.names or field in ("id", "content")]
    values = _meta_values(table, from_meta) if from_meta and has_meta_json(table.schema) else {}
    for field in fields:
        if field in table.schema.names and field not in ("id", "content"):
            found[META_PREFIX + field] = table[field]
            continue
        array = _scalar_array(values[field]) if field in values else None
        if array is None:
            held = ", ".join(metadata_fields(table)) or "none"
            raise FilterError(f"The documents have no scalar metadata field '{field}' (they have: {held}).")
        found[META_PREFIX + field] = array
    return found


def read_metadata(documents: str, fields: Sequence[str], ids: Sequence[str] | None = None) -> pa.Table:
    """
    The `id` and the columns of a documents table (local path or URI) that give `fields` (the JSON `meta` for those
    no column gives), never `content`: of every document, or of those whose id is in `ids`.
    """
    dataset = parquet_dataset(documents)
    names = dataset.schema.names
    columns = ["id", *(name for name in dict.fromkeys(fields) if name in names and name not in ("id", "content"))]
    if has_meta_json(dataset.schema) and any(name not in names for name in fields):
        columns.append(META_COLUMN)
    where = None if ids is None else pc.field("id").isin(pa.array(list(ids), pa.string()))
    return dataset.to_table(columns=list(dict.fromkeys(columns)), filter=where)


def _meta_values(table: pa.Table, keys: Sequence[str] | None = None) -> dict[str, list[Any]]:
    """Each key's values in the rows' JSON `meta` (None where a row lacks it): of `keys`, or of every key found."""
    metas = [json.loads(text) if text else {} for text in table[META_COLUMN].to_pylist()]
    metas = [meta if isinstance(meta, dict) else {} for meta in metas]
    if keys is None:
        keys = list(dict.fromkeys(key for meta in metas for key in meta))
    return {key: [meta.get(key) for meta in metas] for key in keys if any(key in meta for meta in metas)}


def _scalar_array(values: list[Any]) -> pa.Array | None:
    """The values as an Arrow array of a scalar type, or None where they are not scalars of one kind."""
    try:
        array = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return array if scalar_fields(pa.schema([("value", array.type)])) else None
