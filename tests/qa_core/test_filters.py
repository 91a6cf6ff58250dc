"""Metadata filters: parity with Haystack's `document_matches_filter` over a grid of filters x documents, errors."""

import itertools
import random
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from haystack import Document as HaystackDocument
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.errors import FilterError as HaystackFilterError
from haystack.utils.filters import document_matches_filter

from qa_core.retrieval.filters import (
    COMPARISON_OPERATORS,
    FilterError,
    check_filters,
    combine_filters,
    document_columns,
    filter_fields,
    matching_mask,
    parse_filters,
    question_filters,
)

# Every kind of value a field holds: numbers, booleans, strings (dates, with time, time zone, not dates), None,
# lists, nested dictionaries; fields missing from some documents, one field of mixed types.
METAS: list[dict[str, Any]] = [
    {"year": 2019, "score": 0.5, "flag": True, "kind": "a", "date": "2019-06-01", "mixed": 1, "tags": ["x", "y"]},
    {"year": 2021, "score": 1.5, "flag": False, "kind": "b", "date": "2021-01-01T10:00:00", "mixed": "a"},
    {"year": None, "score": None, "flag": None, "kind": None, "date": None, "mixed": None, "tags": None},
    {"score": -2.0, "kind": "c", "date": "2020-01-01T00:00:00+00:00", "author": {"name": "Ann", "age": 40}},
    {"year": 2020, "score": 2020.0, "flag": True, "kind": "a", "date": "2020-01-01", "mixed": 2.5},
    {"year": 1, "kind": "b", "date": "2022-03-04 05:06:07", "author": {"name": "Bob"}, "mixed": True},
    {},
]
FIELDS = ("meta.year", "meta.score", "meta.flag", "meta.kind", "meta.date", "meta.mixed", "meta.tags",
          "meta.author.name", "meta.author.age", "meta.absent", "year", "kind", "id", "content")  # fmt: skip
VALUES = (None, 2020, 1, 2020.0, True, False, 0.5, "a", "b", "2020-01-01", "2020-01-01T00:00:00Z", "abc", "Ann",
          ["a", 2020], [], [None], ["2020-01-01T00:00:00"], datetime(2020, 1, 1), {"a": 1})  # fmt: skip


def _documents() -> list[HaystackDocument]:
    return [HaystackDocument(id=f"d{i}", content=None if i == 6 else f"text {i}", meta=meta)
            for i, meta in enumerate(METAS)]  # fmt: skip


def _haystack(filters: dict[str, Any], documents: list[HaystackDocument]) -> np.ndarray | Exception:
    try:
        return np.array([document_matches_filter(filters, doc) for doc in documents], bool)
    except (HaystackFilterError, TypeError) as error:
        return error


def _ours(filters: dict[str, Any], columns: dict[str, Any], n_docs: int) -> np.ndarray | Exception:
    try:
        return matching_mask(filters, columns, n_docs)
    except FilterError as error:
        return error


def _refused_by_shape(filters: dict[str, Any]) -> bool:
    """The values an ordering comparison refuses before looking at any document (the module's docstring)."""
    value = filters["value"]
    if filters["operator"] not in (">", ">=", "<", "<=") or value is None:
        return False
    if isinstance(value, list | dict):
        return True
    try:
        check_filters(filters)
    except FilterError:
        return True
    return False


def _comparisons() -> list[dict[str, Any]]:
    return [{"field": field, "operator": operator, "value": value}
            for field, operator, value in itertools.product(FIELDS, COMPARISON_OPERATORS, VALUES)
            if operator not in ("in", "not in") or isinstance(value, list)]  # fmt: skip


def test_every_comparison_matches_haystack_or_is_refused_as_documented() -> None:
    documents = _documents()
    columns = document_columns(documents)
    compared = refused = 0
    for filters in _comparisons():
        expected, found = _haystack(filters, documents), _ours(filters, columns, len(documents))
        if isinstance(found, Exception) and not isinstance(expected, Exception):
            # Only the values refused by shape: Haystack matches nothing with them where no document has a value.
            assert _refused_by_shape(filters), (filters, expected, found)
            assert not expected.any(), filters
            refused += 1
        elif isinstance(expected, HaystackFilterError):
            assert isinstance(found, FilterError), (filters, expected, found)
            if not _refused_by_shape(filters):  # a string or a datetime compared with what it cannot be
                assert str(found) == str(expected), filters
            refused += 1
        elif isinstance(expected, TypeError):  # Haystack crashes comparing, e.g., a list with a number
            assert isinstance(found, FilterError), (filters, expected, found)
            refused += 1
        else:
            assert not isinstance(found, Exception), (filters, found)
            assert found.tolist() == expected.tolist(), filters
            compared += 1
    assert (compared, refused) == (868, 840)  # the grid exercises both


def test_nested_logical_filters_match_haystack() -> None:
    documents = _documents()
    columns = document_columns(documents)
    evaluable = [each for each in _comparisons() if not isinstance(_haystack(each, documents), Exception)
                 and not _refused_by_shape(each)]  # fmt: skip
    rng = random.Random(54)

    def node(depth: int) -> dict[str, Any]:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(evaluable)
        width = rng.choice((0, 1, 2, 3))
        return {"operator": rng.choice(("AND", "OR", "NOT")), "conditions": [node(depth - 1) for _ in range(width)]}

    matched = 0
    for _ in range(400):
        filters = {"operator": rng.choice(("AND", "OR", "NOT")), "conditions": [node(3), node(3)]}
        expected = _haystack(filters, documents)
        found = matching_mask(filters, columns, len(documents))
        assert found.tolist() == expected.tolist(), filters
        matched += int(found.sum())
    assert matched > 400  # the filters match documents, not only nothing


def test_a_root_comparison_and_no_filter() -> None:
    columns = document_columns(_documents())
    filters = {"field": "meta.kind", "operator": "==", "value": "a"}
    assert matching_mask(filters, columns, 7).tolist() == [True, False, False, False, True, False, False]
    assert matching_mask(None, columns, 7).all() and matching_mask({}, columns, 7).all()


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"field": "meta.year", "value": 1}, "Invalid filter syntax. See https://docs.haystack.deepset.ai/docs/metadata-filtering for details."),
        ({"conditions": []}, "Invalid filter syntax. See https://docs.haystack.deepset.ai/docs/metadata-filtering for details."),
        ({"operator": "AND", "conditions": [{"field": "meta.year", "value": 1}]},
         "'operator' key missing in {'field': 'meta.year', 'value': 1}"),
        ({"operator": "AND", "conditions": [{"field": "meta.year", "operator": "=="}]},
         "'value' key missing in {'field': 'meta.year', 'operator': '=='}"),
        ({"operator": "AND"}, "'conditions' key missing in {'operator': 'AND'}"),
        ({"operator": "AND", "conditions": [{"conditions": []}]}, "'operator' key missing in {'conditions': []}"),
        ({"operator": "XOR", "conditions": []}, "Unknown logical operator 'XOR'. Valid operators are: ['AND', 'NOT', 'OR']"),
        ({"field": "meta.year", "operator": "like", "value": 1},
         "Unknown comparison operator 'like'. Valid operators are: ['!=', '<', '<=', '==', '>', '>=', 'in', 'not in']"),
        ({"field": "meta.year", "operator": "in", "value": 2020},
         "Filter value must be a `list` when using operator 'in' or 'not in', received type '<class 'int'>'"),
        ({"field": "meta.year", "operator": "not in", "value": "a"},
         "Filter value must be a `list` when using operator 'in' or 'not in', received type '<class 'str'>'"),
        ({"field": "meta.year", "operator": ">", "value": [2020]},
         "Filter value can't be of type <class 'list'> using operators '>', '>=', '<', '<='"),
        ({"field": "meta.year", "operator": "<=", "value": "abc"},
         "Can't compare strings using operators '>', '>=', '<', '<='. Strings are only comparable if they are ISO formatted dates."),
    ],
)  # fmt: skip
def test_malformed_filters_raise_haystacks_message(filters: dict[str, Any], message: str) -> None:
    """As Haystack's BM25 retrieval raises them (its document store's `filter_documents` allows a root without an
    operator)."""
    documents = [HaystackDocument(id="d", content="x", meta={"year": 2020})]
    with pytest.raises(FilterError) as ours:
        matching_mask(filters, {"meta.year": pa.array([2020])}, 1)
    assert str(ours.value) == message
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents(documents)
    with pytest.raises((HaystackFilterError, ValueError)) as theirs:
        store.bm25_retrieval("x", filters=filters)
    assert str(theirs.value) == message


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ([{"field": "meta.year"}], "A filter must be a dictionary, not list: [{'field': 'meta.year'}]."),
        ({"operator": "AND", "conditions": {"field": "meta.year"}},
         "'conditions' must be a list of filters in {'operator': 'AND', 'conditions': {'field': 'meta.year'}}"),
        ({"operator": "OR", "conditions": ["meta.year"]}, "A filter's conditions must be dictionaries, not str: 'meta.year'."),
        ({"field": "score", "operator": ">", "value": 1},
         "Can't filter on field 'score': filter on 'id', 'content' or a metadata field 'meta.<name>'."),
        ({"field": "id.x", "operator": "==", "value": 1},
         "Can't filter on field 'id.x': filter on 'id', 'content' or a metadata field 'meta.<name>'."),
        ({"field": "", "operator": "==", "value": 1}, "A filter's 'field' must be a non-empty string, not ''."),
        ({"field": "meta.year", "operator": ">", "value": {"a": 1}},
         "Filter value can't be of type <class 'dict'> using operators '>', '>=', '<', '<='"),
    ],
)  # fmt: skip
def test_filters_haystack_would_not_refuse_are_refused_with_a_message(filters: Any, message: str) -> None:
    with pytest.raises(FilterError) as error:
        check_filters(filters)
    assert str(error.value) == message


def test_a_comparison_that_fails_on_the_documents_raises_haystacks_message() -> None:
    columns = {"meta.year": pa.array([2020, None]), "meta.kind": pa.array(["a", None])}
    with pytest.raises(FilterError, match="^Can't compare strings using operators"):
        matching_mask({"field": "meta.year", "operator": ">", "value": "2020-01-01"}, columns, 2)
    with pytest.raises(FilterError, match="^Can't compare strings using operators"):
        matching_mask({"field": "meta.kind", "operator": "<", "value": 3}, columns, 2)
    with pytest.raises(FilterError, match="^Can't compare a datetime with a non-datetime value"):
        matching_mask({"field": "meta.year", "operator": ">", "value": datetime(2020, 1, 1)}, columns, 2)
    # Only null values: nothing to compare, nothing matches (as in Haystack).
    assert not matching_mask({"field": "meta.kind", "operator": "<", "value": 3}, {"meta.kind": pa.array([None, None])}, 2).any()


def test_columns_of_timestamps_chunks_and_numpy() -> None:
    stamps = pa.chunked_array([pa.array([datetime(2020, 1, 1, tzinfo=timezone.utc)]), pa.array([None, datetime(2021, 5, 1, tzinfo=timezone.utc)])])
    columns = {"meta.at": stamps, "meta.n": np.array([3, 1, 2])}
    assert matching_mask({"field": "meta.at", "operator": ">=", "value": "2021-01-01"}, columns, 3).tolist() == [False, False, True]
    assert matching_mask({"field": "meta.at", "operator": "==", "value": "2020-01-01T00:00:00+00:00"}, columns, 3).tolist() == [True, False, False]
    assert matching_mask({"field": "meta.n", "operator": "<", "value": 3}, columns, 3).tolist() == [False, True, True]
    with pytest.raises(ValueError, match=r"^The column of meta.n holds 3 values, not one per document \(4\)\.$"):
        matching_mask({"field": "meta.n", "operator": "<", "value": 3}, columns, 4)  # fmt: skip


def test_fields_and_combining() -> None:
    filters = {"operator": "OR", "conditions": [{"field": "year", "operator": "==", "value": 1},
                                                 {"field": "meta.kind", "operator": "==", "value": "a"},
                                                 {"field": "meta.year", "operator": "<", "value": 2},
                                                 {"field": "id", "operator": "in", "value": ["d1"]}]}  # fmt: skip
    assert filter_fields(filters) == ["meta.year", "meta.kind", "id"]
    assert filter_fields(None) == []
    one = {"field": "meta.kind", "operator": "==", "value": "a"}
    assert combine_filters(None, {}) is None
    assert combine_filters(one, None) == one
    assert combine_filters(one, filters) == {"operator": "AND", "conditions": [one, filters]}


def test_filters_from_json_or_yaml_text() -> None:
    one = {"field": "meta.kind", "operator": "==", "value": "a"}
    assert parse_filters('{"field": "meta.kind", "operator": "==", "value": "a"}') == one
    assert parse_filters("field: meta.kind\noperator: '=='\nvalue: a\n") == one
    assert parse_filters("") is None and parse_filters("{}") is None and parse_filters("null") is None
    with pytest.raises(FilterError, match=r"^Filters must be JSON or YAML: "):
        parse_filters('{"field": "meta.kind", "operator": ')
    with pytest.raises(FilterError, match=r"^A filter must be a dictionary, not list"):
        parse_filters("[1, 2]")
    with pytest.raises(FilterError, match=r"^Unknown comparison operator 'like'"):
        parse_filters('{"field": "meta.kind", "operator": "like", "value": 1}')


def test_each_questions_filters_and_the_common_ones() -> None:
    common = {"field": "meta.year", "operator": ">", "value": 2000}
    own = {"field": "meta.kind", "operator": "in", "value": ["a"]}
    column = [None, '{"field": "meta.kind", "operator": "in", "value": ["a"]}']
    assert question_filters(["q1", "q2"], column, common) == [common, {"operator": "AND", "conditions": [common, own]}]
    assert question_filters(["q1", "q2"], column, None) == [None, own]
    with pytest.raises(FilterError) as error:
        question_filters(["q1", "q2"], [None, "{'field': 1}"], None)
    assert str(error.value) == (
        "Question 'q2': its filters are not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1))."
    )
    with pytest.raises(FilterError) as error:
        question_filters(["q1"], ['{"field": "meta.year", "operator": ">", "value": [1]}'], None)
    assert str(error.value) == (
        "Question 'q1': its filters: Filter value can't be of type <class 'list'> using operators '>', '>=', '<', '<='"
    )
