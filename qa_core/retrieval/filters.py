"""
Metadata filters in Haystack 2's syntax with the semantics of `haystack.utils.filters.document_matches_filter`,
evaluated over columns: one boolean per document of a corpus (or shard) for a whole filter at once.

A filter is a comparison `{"field": "meta.year", "operator": ">=", "value": 2020}` (operators `==`, `!=`, `>`,
`>=`, `<`, `<=`, `in`, `not in`) or a logical node `{"operator": "AND", "conditions": [...]}` (`AND`, `OR`, `NOT`:
not all of its conditions). As in Haystack:

- a missing field, or a null, is `None`: `== None` matches it, `!= 5` matches it, an ordering comparison never does;
- `==` / `in` also match two ISO 8601 dates denoting the same instant (`"2020-01-01"` and `"2020-01-01T00:00:00"`);
- an ordering comparison with a string on either side compares dates (a string that is not one is an error);
- a field without `meta.` that is not `id` or `content` names a metadata field (Haystack's converted legacy filters).

Where this differs from Haystack, it refuses what Haystack would evaluate to nothing or crash on: a root filter
without an `operator` (Haystack's document store refuses it as well), `conditions` that are not a list of
filters, a field other than `id`, `content` and `meta.<name>` (`score`, `embedding`, `x.y` are `None` for every
stored document in Haystack), an ordering comparison with a value that is not ordered or is a string that is not a
date, and a comparison that cannot be evaluated for some document even where an earlier condition of its `AND`
/ `OR` already decided that document (Haystack stops at the first deciding condition).

Columns are evaluated vectorized: a numeric or boolean column by numpy comparisons, any other (strings, dates,
lists) by evaluating the comparison once per distinct value (an Arrow dictionary encoding) and spreading the result.

Usage example:
```python
import pyarrow as pa

columns = {"meta.year": pa.array([2019, 2021, None]), "meta.kind": pa.array(["a", "b", "a"])}
filters = {"operator": "AND", "conditions": [
    {"field": "meta.year", "operator": ">=", "value": 2020},
    {"field": "meta.kind", "operator": "in", "value": ["b", "c"]},
]}
assert matching_mask(filters, columns, 3).tolist() == [False, True, False]
```
"""

import json
import operator as operators
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import dateutil.parser
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

LOGICAL_OPERATORS = ("AND", "OR", "NOT")
COMPARISON_OPERATORS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in")
ORDERING = {">": operators.gt, ">=": operators.ge, "<": operators.lt, "<=": operators.le}
# The Document attributes a filter may name without `meta.`.
DOCUMENT_FIELDS = ("id", "content")
# Haystack's Document attributes other than those: a field named so is not metadata (Haystack reads the attribute).
_OTHER_DOCUMENT_ATTRIBUTES = ("blob", "meta", "score", "embedding", "sparse_embedding")
META_PREFIX = "meta."
INVALID_SYNTAX = "Invalid filter syntax. See https://docs.haystack.deepset.ai/docs/metadata-filtering for details."
_STRINGS_NOT_DATES = (
    "Can't compare strings using operators '>', '>=', '<', '<='. "
    "Strings are only comparable if they are ISO formatted dates."
)
_DATETIME_WITH_OTHER = "Can't compare a datetime with a non-datetime value using operators '>', '>=', '<', '<='"

# A column of a corpus's metadata: one value per document (None or null where the document lacks it).
Column = pa.Array | pa.ChunkedArray | np.ndarray | Sequence[Any]


class FilterError(ValueError):
    """A malformed filter, or one that cannot be evaluated on the documents (Haystack's `FilterError` messages)."""


def check_filters(filters: dict[str, Any] | None) -> None:
    """
    Checks a filter's shape, operators and values, as far as they do not depend on the documents.

    :param filters: A filter (`None` or `{}`: no filter).
    :raises FilterError: With Haystack's message where Haystack has one (e.g. `'value' key missing in {...}`,
        `Unknown comparison operator 'like'. Valid operators are: [...]`).
    """
    if not filters:
        return
    if not isinstance(filters, dict):
        raise FilterError(f"A filter must be a dictionary, not {type(filters).__name__}: {filters!r}.")
    if "operator" not in filters:
        raise FilterError(INVALID_SYNTAX)
    _check_node(filters)


def filter_fields(filters: dict[str, Any] | None) -> list[str]:
    """
    The fields a filter reads, each as `meta.<name>`, `id` or `content`, in order of first mention.

    :raises FilterError: If the filter is malformed (`check_filters`).
    """
    check_filters(filters)
    found: dict[str, None] = {}

    def visit(node: dict[str, Any]) -> None:
        if "field" in node:
            found[normalized_field(node["field"])] = None
        else:
            for condition in node["conditions"]:
                visit(condition)

    if filters:
        visit(filters)
    return list(found)


def normalized_field(field: str) -> str:
    """
    A filter's field as the key of its column: `meta.<name>`, `id` or `content` (a name without `meta.` that is
    not `id` or `content` is `meta.<name>`, as Haystack reads converted legacy filters).

    :raises FilterError: For another Document attribute (`score`, `embedding`, ...) or a dotted field whose first
        part is not `meta`.
    """
    if not isinstance(field, str) or not field:
        raise FilterError(f"A filter's 'field' must be a non-empty string, not {field!r}.")
    if field.startswith(META_PREFIX) and len(field) > len(META_PREFIX):
        return field
    if field in DOCUMENT_FIELDS:
        return field
    if "." in field or field in _OTHER_DOCUMENT_ATTRIBUTES:
        raise FilterError(
            f"Can't filter on field '{field}': filter on 'id', 'content' or a metadata field 'meta.<name>'."
        )
    return META_PREFIX + field


def document_columns(documents: Sequence[Any]) -> dict[str, list[Any]]:
    """
    The columns `matching_mask` reads of documents held in memory (`Document`s): `id`, `content` and
    `meta.<key>` for every metadata key of any of them (`None` where a document lacks it).
    """
    keys = dict.fromkeys(key for document in documents for key in document.meta)
    columns = {"id": [document.id for document in documents], "content": [document.content for document in documents]}
    for key in keys:
        columns[META_PREFIX + key] = [document.meta.get(key) for document in documents]
    return columns


def parse_filters(text: str) -> dict[str, Any] | None:
    """
    A filter written as JSON or YAML (a command line's `--filters`), checked (`check_filters`).

    :returns: The filter; None for an empty one (`{}`, `null` or nothing).
    :raises FilterError: If the text is not JSON or YAML, not a mapping, or not a well-formed filter.
    """
    try:
        filters = yaml.safe_load(text)
    except yaml.YAMLError as error:
        problem = str(error).replace("\n", " ")
        raise FilterError(f"Filters must be JSON or YAML: {problem}") from None
    check_filters(filters)
    return filters or None


def question_filters(
    question_ids: Sequence[str], column: Sequence[str | None], common: dict[str, Any] | None
) -> list[dict[str, Any] | None]:
    """
    Each question's filter: its own (a JSON string of the questions table's `filters` column, null for none)
    and the filter for every question (`common`), joined by `AND`.

    :raises FilterError: Naming the first question whose filter is not JSON or not a well-formed filter.
    """
    found = []
    for question_id, text in zip(question_ids, column, strict=True):
        own = None
        if text is not None:
            try:
                own = json.loads(text)
                check_filters(own)
            except json.JSONDecodeError as error:
                raise FilterError(f"Question {question_id!r}: its filters are not JSON ({error}).") from None
            except FilterError as error:
                raise FilterError(f"Question {question_id!r}: its filters: {error}") from None
        found.append(combine_filters(common, own))
    return found


def combine_filters(*filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """The filters given (`None` and `{}` left out) joined by `AND`; `None` when none is given."""
    given = [each for each in filters if each]
    if len(given) <= 1:
        return given[0] if given else None
    return {"operator": "AND", "conditions": given}


def matching_mask(filters: dict[str, Any] | None, columns: Mapping[str, Column], n_docs: int) -> np.ndarray:
    """
    Which documents a filter matches, as `document_matches_filter` decides for each.

    :param filters: A filter (`None` or `{}`: every document matches).
    :param columns: The documents' fields by `normalized_field` key (`meta.year`, `id`, `content`), each one value
        per document, null or `None` where a document lacks it; a field without a column is missing from every
        document. A field `meta.a.b` reads the values of column `meta.a` at key `b` where there is no `meta.a.b`.
    :param n_docs: The number of documents.
    :returns: `(n_docs,)` bool.
    :raises FilterError: If the filter is malformed, or a comparison cannot be evaluated on some document (a
        string that is not a date compared with `>`, a datetime with a number).
    :raises ValueError: If a column does not hold `n_docs` values.
    """
    check_filters(filters)
    if not filters:
        return np.ones(n_docs, bool)
    return _node_mask(filters, columns, n_docs)


def _check_node(node: Any) -> None:
    if not isinstance(node, dict):
        raise FilterError(f"A filter's conditions must be dictionaries, not {type(node).__name__}: {node!r}.")
    if "field" in node:
        _check_comparison(node)
        return
    if "operator" not in node:
        raise FilterError(f"'operator' key missing in {node}")
    if "conditions" not in node:
        raise FilterError(f"'conditions' key missing in {node}")
    if node["operator"] not in LOGICAL_OPERATORS:
        raise FilterError(
            f"Unknown logical operator '{node['operator']}'. Valid operators are: {sorted(LOGICAL_OPERATORS)}"
        )
    if not isinstance(node["conditions"], list):
        raise FilterError(f"'conditions' must be a list of filters in {node}")
    for condition in node["conditions"]:
        _check_node(condition)


def _check_comparison(node: dict[str, Any]) -> None:
    if "operator" not in node:
        raise FilterError(f"'operator' key missing in {node}")
    if "value" not in node:
        raise FilterError(f"'value' key missing in {node}")
    normalized_field(node["field"])
    operator, value = node["operator"], node["value"]
    if operator not in COMPARISON_OPERATORS:
        raise FilterError(
            f"Unknown comparison operator '{operator}'. Valid operators are: {sorted(COMPARISON_OPERATORS)}"
        )
    if operator in ("in", "not in") and not isinstance(value, list):
        raise FilterError(
            f"Filter value must be a `list` when using operator 'in' or 'not in', received type '{type(value)}'"
        )
    if operator in ORDERING and value is not None:
        if isinstance(value, list | dict | tuple | set):
            raise FilterError(f"Filter value can't be of type {type(value)} using operators '>', '>=', '<', '<='")
        if isinstance(value, str):
            _parse_date(value)  # raises for a string that is not a date
        elif not isinstance(value, int | float | datetime):
            raise FilterError(f"Filter value can't be of type {type(value)} using operators '>', '>=', '<', '<='")


def _node_mask(node: dict[str, Any], columns: Mapping[str, Column], n_docs: int) -> np.ndarray:
    if "field" in node:
        return _comparison_mask(node, columns, n_docs)
    masks = [_node_mask(condition, columns, n_docs) for condition in node["conditions"]]
    if node["operator"] == "OR":
        return np.logical_or.reduce(masks) if masks else np.zeros(n_docs, bool)
    every = np.logical_and.reduce(masks) if masks else np.ones(n_docs, bool)
    return every if node["operator"] == "AND" else ~every


def _comparison_mask(node: dict[str, Any], columns: Mapping[str, Column], n_docs: int) -> np.ndarray:
    field, operator, value = normalized_field(node["field"]), node["operator"], node["value"]
    if operator in ("!=", "not in"):
        return ~_comparison_mask({**node, "operator": "==" if operator == "!=" else "in"}, columns, n_docs)
    column = _column(field, columns, n_docs)
    if column is None:  # missing from every document
        return np.full(n_docs, _matches(operator, None, value))
    if isinstance(column, pa.Array) and _is_numeric(column.type):
        return _numeric_mask(operator, column, value)
    if isinstance(column, pa.Array) and _is_text(column.type) and operator in ("==", "in"):
        wanted = value if operator == "in" else [value]
        if not any(isinstance(each, datetime) or _as_iso_date(each) is not None for each in wanted):
            return _text_equal_mask(column, wanted)
    return _values_mask(operator, column, value)


def _column(field: str, columns: Mapping[str, Column], n_docs: int) -> pa.Array | list[Any] | None:
    """The field's values as one Arrow array, or a Python list (nested or mixed values); None if missing."""
    parts: list[str] = []
    key = field
    while key not in columns:
        if not key.startswith(META_PREFIX) or "." not in key[len(META_PREFIX) :]:
            return None
        key, last = key.rsplit(".", 1)
        parts.insert(0, last)
    column = columns[key]
    if isinstance(column, pa.Array | pa.ChunkedArray) and pa.types.is_null(column.type):
        return None
    if len(column) != n_docs:
        raise ValueError(f"The column of {key} holds {len(column)} values, not one per document ({n_docs}).")
    if parts:
        values = column.to_pylist() if isinstance(column, pa.Array | pa.ChunkedArray) else list(column)
        return [_nested(value, parts) for value in values]
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    if isinstance(column, pa.Array):
        return column
    try:
        return pa.array(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):  # mixed types: as they are
        return list(column)


def _nested(value: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _is_numeric(arrow_type: pa.DataType) -> bool:
    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_boolean(arrow_type)


def _is_text(arrow_type: pa.DataType) -> bool:
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _text_equal_mask(column: pa.Array, wanted: list[Any]) -> np.ndarray:
    """
    Which of a column of strings equal one of `wanted`, none of them a date (so equality is the strings'; a value
    that is not a string equals no string, `None` the nulls): vectorized, however many distinct strings.
    """
    strings = pa.array([each for each in wanted if isinstance(each, str)], column.type)
    mask = np.asarray(pc.is_in(column, value_set=strings).fill_null(False))
    return mask | np.asarray(column.is_null()) if any(each is None for each in wanted) else mask


def _is_number(value: Any) -> bool:
    """A value numpy compares with numbers as Python does (booleans included: `True == 1`)."""
    return isinstance(value, int | float)


def _numeric_mask(operator: str, column: pa.Array, value: Any) -> np.ndarray:
    """A comparison over a numeric or boolean column (no dates, no strings: those compare per value)."""
    valid = np.asarray(column.is_valid())
    filled = column.fill_null(False if pa.types.is_boolean(column.type) else 0)
    numbers = filled.to_numpy(zero_copy_only=False)
    if operator == "in":
        masks = [_numeric_mask("==", column, each) for each in value]
        return np.logical_or.reduce(masks) if masks else np.zeros(len(column), bool)
    if operator == "==":
        if value is None:
            return ~valid
        return valid & (numbers == value) if _is_number(value) else np.zeros(len(column), bool)
    if value is None:  # an ordering comparison with None matches nothing
        return np.zeros(len(column), bool)
    if valid.any() and not _is_number(value):  # as Haystack compares the first value present
        _matches(operator, _first_valid(column), value)
    return valid & ORDERING[operator](numbers, value) if _is_number(value) else np.zeros(len(column), bool)


def _first_valid(column: pa.Array) -> Any:
    return column.filter(column.is_valid())[0].as_py()


def _values_mask(operator: str, column: pa.Array | list[Any], value: Any) -> np.ndarray:
    """A comparison evaluated once per distinct value of the column, spread over the documents."""
    if isinstance(column, list):
        return _python_values_mask(operator, column, value)
    try:
        encoded = pc.dictionary_encode(column)
    except pa.ArrowNotImplementedError:  # lists, structs: no dictionary
        return _python_values_mask(operator, column.to_pylist(), value)
    per_value = np.array([_matches(operator, each, value) for each in encoded.dictionary.to_pylist()], bool)
    indices = encoded.indices
    valid = np.asarray(indices.is_valid())
    mask = np.empty(len(column), bool)
    mask[valid] = per_value[np.asarray(indices.filter(indices.is_valid()))]
    if not valid.all():
        mask[~valid] = _matches(operator, None, value)
    return mask


def _python_values_mask(operator: str, values: list[Any], value: Any) -> np.ndarray:
    known: dict[tuple[type, Any], bool] = {}
    mask = np.empty(len(values), bool)
    for row, each in enumerate(values):
        try:
            key = (type(each), each)
            found = known.get(key)
            if found is None:
                found = known[key] = _matches(operator, each, value)
        except TypeError:  # unhashable (a list, a dict)
            found = _matches(operator, each, value)
        mask[row] = found
    return mask


def _matches(operator: str, document_value: Any, value: Any) -> bool:
    """One document's value against a comparison of `==`, `in` or an ordering operator."""
    if operator == "==":
        return _equal(document_value, value)
    if operator == "in":
        return any(_equal(each, document_value) for each in value)
    return _ordered(ORDERING[operator], document_value, value)


def _equal(document_value: Any, value: Any) -> bool:
    if document_value == value:
        return True
    first, second = _as_iso_date(document_value), _as_iso_date(value)
    if first is None or second is None:
        return False
    first, second = _same_awareness(first, second)
    return first == second


def _as_iso_date(value: Any) -> datetime | None:
    """A datetime, or a string of a full ISO 8601 date (`YYYY-MM-DD`, then nothing or a time), parsed; else None."""
    if isinstance(value, datetime):
        return value
    looks_like_date = (
        isinstance(value, str)
        and len(value) >= 10
        and value[:4].isdigit()
        and value[4] == "-"
        and value[5:7].isdigit()
        and value[7] == "-"
        and value[8:10].isdigit()
        and (len(value) == 10 or value[10] in "Tt ")
    )
    if not looks_like_date:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        try:
            return dateutil.parser.isoparse(value)
        except (ValueError, OverflowError):
            return None


def _ordered(compare: Callable[[Any, Any], bool], document_value: Any, value: Any) -> bool:
    if document_value is None or value is None:
        return False
    if isinstance(document_value, str) or isinstance(value, str):
        if not isinstance(document_value, datetime):
            document_value = _parse_date(document_value)
        if not isinstance(value, datetime):
            value = _parse_date(value)
    if isinstance(document_value, datetime) and isinstance(value, datetime):
        document_value, value = _same_awareness(document_value, value)
    if isinstance(document_value, datetime) != isinstance(value, datetime):
        raise FilterError(_DATETIME_WITH_OTHER)
    try:
        return compare(document_value, value)
    except TypeError as error:
        raise FilterError(
            f"Can't compare a value of type {type(document_value).__name__} with a filter value of type "
            f"{type(value).__name__} using operators '>', '>=', '<', '<='"
        ) from error


def _parse_date(value: Any) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except (ValueError, TypeError):
        try:
            return dateutil.parser.parse(value)
        except (ValueError, TypeError, OverflowError) as error:
            raise FilterError(_STRINGS_NOT_DATES) from error


def _same_awareness(first: datetime, second: datetime) -> tuple[datetime, datetime]:
    """Both naive or both aware: a naive one takes the other's time zone (Haystack's non-strict comparison)."""
    if (first.tzinfo is None) == (second.tzinfo is None):
        return first, second
    if first.tzinfo is None:
        return first.replace(tzinfo=second.tzinfo), second
    return first, second.replace(tzinfo=first.tzinfo)
