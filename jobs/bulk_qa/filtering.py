"""
The run's metadata filters (Haystack 2's syntax, `qa_core.retrieval.filters`): `--filters` for every question, ANDed
with a question's own (the questions table's `filters` column, a JSON string, null for none). Checked before any
work (`question_filters`, `check_fields`): a malformed filter, a question's filter that is not JSON, or one that
reads a field the index (or, without retrieval, the documents) does not hold is refused with one line naming the
question (exit 2). Retrieved questions are filtered by the retrieval actors (`jobs.retrieval.retrieve`); questions
that name `document_ids` keep those of their documents that match (`restrict_named_documents`); `--every-document`
asks a question only of the documents that match (`jobs.bulk_qa.every_document`).
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from jobs.indexing.filter_fields import FILTER_FIELDS_KEY, chosen_fields, held_fields
from jobs.indexing.record import BUILD_FILE
from jobs.metadata import metadata_columns, metadata_fields, read_metadata
from jobs.retrieval.retrieve import FILTERS, filter_groups, row_filters
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, parquet_dataset, read_json, redact
from qa_core.retrieval.filter_fields import check_fields_held
from qa_core.retrieval.filters import META_PREFIX, FilterError, filter_fields, matching_mask, question_filters

# `check_fields_held`'s words for the index, and those for a documents table read without one.
INDEX_HOLDS, DOCUMENTS_HOLD = "the index does not keep (it keeps", "the documents do not hold (they hold"


@dataclass(frozen=True)
class RunFilters:
    """A run's filters: each question's id and filter (None: none), in the questions table's order."""

    ids: list[str]
    filters: list[dict[str, Any] | None]
    common: dict[str, Any] | None  # `--filters`, ANDed into each question's

    @property
    def fields(self) -> list[str]:
        """The metadata fields the filters read (`filtered_fields`)."""
        return filtered_fields(self.filters)


def run_filters(questions: str, schema: pa.Schema, squad: bool, settings: RetrievalSettings) -> RunFilters | None:
    """
    The run's filters, checked (`read_question_filters`); None where there are none (no `--filters`, no `filters`
    column).

    :raises InputError: For SQuAD-style questions (their contexts have no metadata), or a malformed filter.
    """
    if settings.filters is None and FILTERS not in schema.names:
        return None
    if squad:
        raise InputError(
            f"{redact(questions)}: metadata filters choose documents of --documents by their metadata; SQuAD-style "
            "questions carry their own contexts, which have none: leave out --filters and the filters column."
        )
    ids, filters = read_question_filters(questions, schema, settings.filters)
    return RunFilters(ids, filters, settings.filters)


def check_run_filters(
    run: RunFilters, settings: RetrievalSettings, documents: str, retrieval: bool, kept: str | None = None
) -> None:
    """
    Refuses, before any work, a filter that reads a field the run's index does not keep (with `retrieval`: the
    `--index`, the index `kept` from the run this one resumes, or the one it will build), or without retrieval one
    the documents do not hold (`check_fields`).
    """
    if retrieval:
        check_fields(run, index_fields(settings, documents, kept))
    else:
        check_fields(run, document_fields(documents), INDEX_HOLDS, DOCUMENTS_HOLD)


def read_question_filters(
    questions: str, schema: pa.Schema, common: dict[str, Any] | None
) -> tuple[list[str], list[dict[str, Any] | None]]:
    """
    Each question's id and filter (`common` ANDed with its `filters` column's), read from the questions table
    (`id` and `filters` only).

    :raises InputError: Naming the first question whose filter is not JSON or not a well-formed filter.
    """
    columns = ["id", FILTERS] if FILTERS in schema.names else ["id"]
    table = parquet_dataset(questions).to_table(columns=columns)
    ids = table["id"].cast(pa.string()).to_pylist()
    own = table[FILTERS].to_pylist() if FILTERS in schema.names else [None] * len(ids)
    try:
        return ids, question_filters(ids, own, common)
    except FilterError as error:
        raise InputError(f"{redact(questions)}: {error}") from None


def index_fields(settings: RetrievalSettings, documents: str, kept: str | None = None) -> list[str]:
    """
    The fields (`meta.<name>`) a run's index holds for filtering, from its `build.json` before it is checked: those
    the `--index` (or the index `kept` from the run this one resumes) names, or for an index the run builds (or a
    kept one it completes) those it will keep (`--filter-fields`, else every scalar metadata field).
    """
    location = settings.index or kept
    record = read_json(location, BUILD_FILE) if location is not None else None
    if isinstance(record, dict) and (FILTER_FIELDS_KEY in record or settings.index is not None):
        return held_fields(record)
    return [META_PREFIX + name for name in chosen_fields(documents, settings.filter_fields)[0]]


def document_fields(documents: str) -> list[str]:
    """The scalar metadata fields (`meta.<name>`) of a documents table (`jobs.metadata.metadata_fields`)."""
    names = [name for name in parquet_dataset(documents).schema.names if name not in ("id", "content")]
    return [META_PREFIX + name for name in metadata_fields(read_metadata(documents, names))]


def check_fields(run: RunFilters, held: list[str], *holder: str) -> None:
    """
    Refuses a filter that reads a field not `held` (`check_fields_held`: the index's): `--filters` first, then each
    question's own.

    :param holder: What holds the fields, in place of the index: (`INDEX_HOLDS`, the words replacing them).
    :raises InputError: Naming `--filters` or the question, the field and the fields held.
    """
    seen: set[str] = set()
    questions = ((f"Question {question_id!r}", each) for question_id, each in zip(run.ids, run.filters, strict=True))
    for where, each in [("--filters", run.common), *questions]:
        key = repr(each)
        if each is None or key in seen:
            continue
        seen.add(key)
        try:
            check_fields_held(each, held)
        except FilterError as error:
            raise InputError(f"{where}: {str(error).replace(*holder) if holder else error}") from None


def filtered_fields(filters: list[dict[str, Any] | None]) -> list[str]:
    """The metadata fields (names without `meta.`) that any of the filters reads, in order of first mention."""
    fields = (field for each in filters if each for field in filter_fields(each))
    return list(dict.fromkeys(field[len(META_PREFIX) :] for field in fields if field.startswith(META_PREFIX)))


def documents_mask(documents: pa.Table, filters: dict[str, Any] | None, fields: list[str]) -> np.ndarray:
    """Which rows of a table of documents (`id` and the columns giving `fields`) a filter matches."""
    columns = {"id": documents["id"], **metadata_columns(documents, fields)}
    return matching_mask(filters, columns, documents.num_rows)


def restrict_named_documents(
    batch: pa.Table, documents: str, common: dict[str, Any] | None, fields: list[str]
) -> pa.Table:
    """
    Questions -> the same, those that name `document_ids` and have a filter naming only the documents it matches
    (their metadata read from the documents table by id, texts never; an id the table lacks is kept, reported
    unknown as without a filter). A `map_batches` function.
    """
    filters = row_filters(batch, common)
    named = batch["document_ids"].to_pylist()
    rows = [row for row, ids in enumerate(named) if ids and filters[row] is not None]
    if not rows:
        return batch
    wanted = sorted({document_id for row in rows for document_id in named[row]})
    metadata = read_metadata(documents, fields, wanted)
    known = metadata["id"].cast(pa.string()).to_pylist()
    for group in filter_groups(filters, rows).values():
        left_out = set(known) - {
            known[at] for at in np.flatnonzero(documents_mask(metadata, filters[group[0]], fields))
        }
        for row in group:
            named[row] = [document_id for document_id in named[row] if document_id not in left_out]
    column = batch.schema.get_field_index("document_ids")
    return batch.set_column(column, "document_ids", pa.array(named, batch.schema.field(column).type))
