"""A documents table's metadata as filters read it: its scalar columns, then the keys of a folder corpus's `meta`."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.metadata import metadata_columns, metadata_fields, read_metadata
from qa_core.retrieval.filters import FilterError, matching_mask
from tests.jobs.conftest import write_table

META = [
    {"author": "Ann", "year": 1999, "tags": ["x"], "mixed": 1, "file_path": "ignored"},
    {"author": None, "mixed": "one"},
    {"author": "Bo", "draft": True},
]
TABLE = pa.table(
    {
        "id": ["a", "b", "c"],
        "content": ["x", "y", None],
        "year": [2020, None, 2022],
        "file_path": ["a.txt", "b.txt", "c.txt"],
        "pages": pa.array([[1], [2], [3]]),  # a list: not a filter field
        "meta": [json.dumps(meta) for meta in META],
    }
)


def test_scalar_columns_then_the_meta_keys_no_column_gives() -> None:
    """A key of lists, or of values of several kinds, is not a field; a column wins over the key of its name."""
    assert metadata_fields(TABLE) == ["year", "file_path", "author", "draft"]
    columns = metadata_columns(TABLE, ["year", "author", "draft"])
    assert columns["meta.author"].to_pylist() == ["Ann", None, "Bo"]
    assert columns["meta.draft"].to_pylist() == [None, None, True]
    assert metadata_fields(TABLE.drop_columns(["meta"])) == ["year", "file_path"]
    filters = {"operator": "OR", "conditions": [{"field": "meta.author", "operator": "==", "value": "Bo"},
                                                {"field": "meta.year", "operator": "<", "value": 2021}]}  # fmt: skip
    assert matching_mask(filters, columns, 3).tolist() == [True, False, True]


def test_a_field_the_documents_lack_is_named_with_those_they_have(tmp_path: Path) -> None:
    with pytest.raises(FilterError, match=r"^The documents have no scalar metadata field 'tags' \(they have: year, "):
        metadata_columns(TABLE, ["tags"])
    path = write_table(tmp_path / "documents.parquet", TABLE.to_pydict())
    read = read_metadata(path, ["author"], ids=["c", "a"])  # by id, never the texts
    assert read.column_names == ["id", "meta"] and sorted(read["id"].to_pylist()) == ["a", "c"]
