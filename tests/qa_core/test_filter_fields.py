"""The filter fields an index keeps: which columns by default, the file's round trip, fields not kept refused."""

from datetime import datetime

import pyarrow as pa
import pytest

from qa_core.retrieval.filter_fields import check_fields_held, read_filter_fields, scalar_fields, write_filter_fields
from qa_core.retrieval.filters import FilterError, matching_mask

TABLE = pa.table({
    "id": ["a", "b", "c"],
    "content": ["x", "y", None],
    "year": [2019, None, 2021],
    "kind": ["memo", "letter", None],
    "at": pa.array([datetime(2020, 1, 1), None, datetime(2022, 5, 1)], pa.timestamp("us")),
    "flag": [True, False, None],
    "tags": [["t"], [], None],
    "author": [{"name": "Ann"}, None, {"name": "Bob"}],
    "blob": pa.array([b"1", b"2", b"3"]),
})  # fmt: skip


def test_the_default_fields_are_the_scalar_metadata_columns() -> None:
    assert scalar_fields(TABLE.schema) == ["year", "kind", "at", "flag"]


def test_kept_fields_round_trip_memory_mapped_and_filter_as_the_table(tmp_path) -> None:
    write_filter_fields(tmp_path, TABLE.select(scalar_fields(TABLE.schema)))
    columns = read_filter_fields(tmp_path)
    assert list(columns) == ["meta.year", "meta.kind", "meta.at", "meta.flag"]
    assert columns["meta.year"].to_pylist() == [2019, None, 2021]
    filters = {"operator": "OR", "conditions": [{"field": "meta.at", "operator": ">", "value": "2021-01-01"},
                                                {"field": "kind", "operator": "==", "value": "letter"}]}  # fmt: skip
    assert matching_mask(filters, columns, 3).tolist() == [False, True, True]
    with pytest.raises(ValueError, match=r"^Cannot read .*filter_fields\.arrow"):
        read_filter_fields(tmp_path / "elsewhere")


def test_a_filter_on_a_field_not_kept_is_refused_naming_the_fields_kept() -> None:
    held = ["meta.year", "meta.kind"]
    check_fields_held({"field": "meta.year", "operator": "==", "value": 1}, held)
    check_fields_held({"field": "id", "operator": "in", "value": ["a"]}, held)  # the index's ids
    check_fields_held(None, [])
    with pytest.raises(FilterError) as error:
        check_fields_held({"operator": "NOT", "conditions": [{"field": "tags", "operator": "==", "value": 1}]}, held)
    assert str(error.value) == (
        "The filter reads the field 'meta.tags', which the index does not keep (it keeps: meta.kind, meta.year)."
    )
    with pytest.raises(FilterError, match=r"^The filter reads the field 'content', .* \(it keeps: none\)\.$"):
        check_fields_held({"field": "content", "operator": "==", "value": "x"}, [])
