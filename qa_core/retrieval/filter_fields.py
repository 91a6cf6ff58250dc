"""
The metadata fields an index keeps for filtering (`filters`), so that a filtered search reads no documents table:
the chosen columns of an index shard's documents, in the shard's order, as an uncompressed Arrow IPC file
(`FILTER_FIELDS_FILE`) read memory-mapped.

Usage example:
```python
table = pa.table({"id": ["a", "b"], "content": ["x", "y"], "year": [2019, 2021], "tags": [["t"], []]})
fields = scalar_fields(table.schema)  # ["year"]: the metadata columns of a scalar type
write_filter_fields(folder, table.select(fields))
columns = read_filter_fields(folder)  # {"meta.year": <Arrow array>}
check_fields_held({"field": "meta.year", "operator": ">", "value": 2020}, columns)
mask = matching_mask({"field": "meta.year", "operator": ">", "value": 2020}, columns, 2)
```
"""

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from qa_core.retrieval.filters import DOCUMENT_FIELDS, META_PREFIX, FilterError, filter_fields
from qa_core.retrieval.index_io import replaced

FILTER_FIELDS_FILE = "filter_fields.arrow"


def scalar_fields(schema: pa.Schema) -> list[str]:
    """
    The metadata columns of a documents table that hold one scalar a row (numbers, booleans, strings, dates and
    times), in the schema's order: every column but `id` and `content`, less lists, structures and binaries.
    """
    return [field.name for field in schema if field.name not in DOCUMENT_FIELDS and _is_scalar(field.type)]


def _is_scalar(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_temporal(arrow_type)
        or pa.types.is_null(arrow_type)
    )


def write_filter_fields(folder: Path, table: pa.Table) -> None:
    """
    Writes a shard's filter fields: `table` holds its documents' metadata columns to keep, one row per document in
    the shard's order (an uncompressed Arrow IPC file, `FILTER_FIELDS_FILE`).
    """
    with replaced(Path(folder) / FILTER_FIELDS_FILE) as partial:  # a shard kept by an update is a hard link
        with pa.OSFile(str(partial), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)


def read_filter_fields(folder: Path, mmap: bool = True) -> dict[str, pa.ChunkedArray]:
    """
    A shard's filter fields, keyed as `filters.matching_mask` reads them (`meta.<name>`).

    :raises ValueError: If the file is missing or not an Arrow IPC file.
    """
    path = Path(folder) / FILTER_FIELDS_FILE
    try:
        source = pa.memory_map(str(path), "r") if mmap else pa.OSFile(str(path), "rb")
        table = pa.ipc.open_file(source).read_all()
    except (OSError, pa.ArrowInvalid) as error:
        raise ValueError(f"Cannot read {path}: {error}") from error
    return {META_PREFIX + name: table[name] for name in table.column_names}


def check_fields_held(filters: dict[str, Any] | None, held: Mapping[str, Any] | Collection[str]) -> None:
    """
    Refuses a filter that reads a field an index does not keep (`id` is always kept: the index's ids).

    :param held: The kept fields' keys (`meta.<name>`), or `read_filter_fields`' columns.
    :raises FilterError: Naming the first such field and the fields kept.
    """
    for field in filter_fields(filters):
        if field != "id" and field not in held:
            kept = ", ".join(sorted(held)) or "none"
            raise FilterError(f"The filter reads the field '{field}', which the index does not keep (it keeps: {kept}).")
