"""
The Parquet tables the jobs read (questions, documents, replies): what each must hold, checked from their footers
before any worker starts, and the fingerprint of an input's files that recognises a changed input. Every problem
found is an `InputError` naming the file and the column.
"""

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from jobs.storage import InputError, parquet_dataset, redact, resolve_path


@dataclass(frozen=True)
class TableSpec:
    """What a table must hold: required columns with their kinds, optional ones, and which column is its id."""

    name: str
    required: dict[str, str]
    optional: dict[str, str]
    id_column: str


QUESTIONS = TableSpec(
    "questions",
    {"id": "string", "query": "string"},
    {"document_ids": "list<string>", "context": "string", "filters": "string"},  # filters: JSON, a metadata filter
    "id",
)
DOCUMENTS = TableSpec(
    "documents", {"id": "string", "content": "string"}, {"page_number": "integer", "file_path": "string"}, "id"
)
REPLIES = TableSpec(
    "replies", {"question_id": "string", "replies": "list<string>"}, {"meta": "list<string>"}, "question_id"
)


def _is_kind(data_type: pa.DataType, kind: str) -> bool:
    if kind == "string":
        return pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or pa.types.is_null(data_type)
    if kind == "integer":
        return pa.types.is_integer(data_type) or pa.types.is_null(data_type)
    if kind == "list<string>":
        return (pa.types.is_list(data_type) or pa.types.is_large_list(data_type)) and _is_kind(
            data_type.value_type, "string"
        )
    raise ValueError(kind)


# Ray Data's extension type for arbitrary Python objects: its values are pickles, and reading them unpickles.
PICKLED_OBJECT_TYPE = "ray.data.arrow_pickled_object"


def _holds_pickles(data_type: pa.DataType, field: pa.Field | None = None) -> bool:
    """Whether a column's type is, or nests, Ray's pickled-object type (registered in this process or not)."""
    if (
        field is not None
        and field.metadata
        and field.metadata.get(b"ARROW:extension:name") == PICKLED_OBJECT_TYPE.encode()
    ):
        return True
    if isinstance(data_type, pa.ExtensionType):
        return data_type.extension_name == PICKLED_OBJECT_TYPE or _holds_pickles(data_type.storage_type)
    if pa.types.is_dictionary(data_type):
        return _holds_pickles(data_type.value_type)
    return any(_holds_pickles(data_type.field(i).type, data_type.field(i)) for i in range(data_type.num_fields))


def table_schema(path: str, spec: TableSpec) -> pa.Schema:
    """
    Opens a Parquet file or folder (metadata only) and checks its columns against `spec`.

    :raises InputError: If the path is missing, not Parquet, lacks a required column, has a column of the wrong
        type, or has any column of pickled Python objects (input data is never unpickled).
    """
    filesystem, inner = resolve_path(path)
    shown = redact(path)
    try:
        schema = pads.dataset(inner, filesystem=filesystem, format="parquet").schema
    except FileNotFoundError:
        raise InputError(f"{shown}: the {spec.name} file does not exist.") from None
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"{shown}: the {spec.name} file is not readable Parquet: {error}") from None
    if not schema.names and filesystem.get_file_info(inner).type == pafs.FileType.Directory:
        raise InputError(f"{shown}: the {spec.name} folder holds no Parquet files.")
    for column in schema.names:
        if _holds_pickles(schema.field(column).type, schema.field(column)):
            raise InputError(
                f"{shown}: column '{column}' of the {spec.name} table holds pickled Python objects "
                f"('{PICKLED_OBJECT_TYPE}'); reading them would unpickle them, which can run arbitrary code, "
                "so the job refuses them. Drop that column or store it as plain Arrow types."
            )
    for column in spec.required:
        if column not in schema.names:
            raise InputError(f"{shown}: the {spec.name} table has no column '{column}' (columns: {schema.names}).")
    for column, kind in {**spec.required, **spec.optional}.items():
        if column in schema.names and not _is_kind(schema.field(column).type, kind):
            raise InputError(
                f"{shown}: column '{column}' of the {spec.name} table must be {kind}, not {schema.field(column).type}."
            )
    return schema


def table_rows(path: str) -> int:
    """The rows of a Parquet file or folder, from its footers."""
    return parquet_dataset(path).count_rows()


def table_bytes(path: str) -> int:
    """The uncompressed size of a Parquet file or folder's data, from its footers."""
    return sum(
        fragment.metadata.row_group(index).total_byte_size
        for fragment in parquet_dataset(path).get_fragments()
        for index in range(fragment.metadata.num_row_groups)
    )


def read_ids(path: str, spec: TableSpec) -> pa.ChunkedArray:
    """The id column of a Parquet file or folder (no other column is read)."""
    return parquet_dataset(path).to_table(columns=[spec.id_column])[0]


def input_fingerprint(path: str) -> list[list[Any]]:
    """Name, size and modification time of every file of an input, to recognise a changed input on resume."""
    filesystem, inner = resolve_path(path)
    info = filesystem.get_file_info(inner)
    infos = [info] if info.type == pafs.FileType.File else filesystem.get_file_info(pafs.FileSelector(inner, True))
    return sorted([i.path, i.size, i.mtime_ns] for i in infos if i.type == pafs.FileType.File)
