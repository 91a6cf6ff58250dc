"""
A run's index, planned before Ray starts and completed once its output folder is claimed: an `--index` checked
against the documents, or the index of the run this one resumes (`_index/` in its output folder, so that a resumed
run does not rebuild it), or a new one built there, with the parts its retrieval method needs
(`qa_core.retrieval.methods`); and whether the run reads its documents from the index's stores (`reads_store`).
"""

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from jobs.engines import Engine
from jobs.indexing.build import BuiltIndex, build_index, build_index_with_ray, write_index
from jobs.indexing.check import check_given_index
from jobs.indexing.filter_fields import FILTER_FIELDS_KEY, add_filter_fields
from jobs.indexing.record import (
    BUILD_FILE,
    STORE_COLUMNS_KEY,
    STORED_COLUMNS,
    earlier_split,
    read_json,
    shard_locations,
    summary,
)
from jobs.indexing.vectors import complete_dense_part
from jobs.indexing.versions import current_version
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import parquet_dataset

INDEX_FOLDER = "_index"  # the run's index, inside its output folder
# Each index part a retrieval method may need beyond the BM25 part (`qa_core.retrieval.methods.INDEX_PARTS`), by
# name: completes the part in an index folder and returns its section of the build record.
PART_BUILDERS = {"dense": complete_dense_part}


@dataclass(frozen=True)
class IndexPlan:
    """
    The run's index: where the retrieval actors load it from and what the manifest says of it.

    :param location: The index folder (local path or URI).
    :param record: Documents, vocabulary size, build seconds, algorithm, parameters, splitting, fingerprint, and
        `source`: `built` (by this run), `resumed` (kept from the run this one resumes) or `given` (`--index`).
    :param built: An index this run built in memory, not saved yet (`complete_index` saves and drops it).
    :param pending: The index is still to be built by Ray into `location` (`complete_index` builds it).
    :param store: The run reads its documents from the index's stores (`reads_store`), and joins no documents table.
    :param documents: With `store`, the documents table: read only for the named ids that the stores lack.
    """

    location: str
    record: dict[str, Any]
    built: BuiltIndex | None = None
    pending: bool = False
    store: bool = False
    documents: str | None = None

    @property
    def shard_locations(self) -> list[str]:
        """The folder of each shard, in corpus order (the index folder itself when it has one shard)."""
        return shard_locations(self.location, self.record.get("shards", 1))


def reads_store(plan: IndexPlan, documents_path: str, documents: pa.Schema) -> IndexPlan:
    """
    The plan, reading the documents it hands the reader from the index's stores (`workers.fetch`) where it can: an
    index whose shards keep stores (or that this run builds, which writes them), and the documents' `page_number`
    and `file_path` kept in the stores where the documents have them (an index built before they were kept has ids
    and texts only). Then the retrieved passages are read from the stores by position, and the documents that
    questions name in `document_ids` by id: the documents table (`documents_path`) is read only for named ids that
    the stores lack (documents without content, or split into no passage). Else the documents table is joined.
    """
    built = plan.pending or plan.built is not None  # built by this run: its stores keep all the columns
    stored = plan.pending or plan.record.get("store", False)
    kept = STORED_COLUMNS if built else plan.record.get(STORE_COLUMNS_KEY, [])
    serves = stored and _store_serves(documents, kept)
    return replace(plan, store=serves, documents=documents_path if serves else None)


def given_store(settings: RetrievalSettings, documents_path: str, location: str | None = None) -> bool:
    """
    Whether a run given `--index` (or the index folder at `location`: the one a resumed run saved) will read its
    documents from the index's stores (`reads_store`), from the index's `build.json` before it is checked: then
    the run joins no documents table, whatever its size.
    """
    location = location or settings.index
    record = read_json(current_version(location), BUILD_FILE) if location is not None else None
    if not isinstance(record, dict) or not record.get("store"):
        return False
    return _store_serves(parquet_dataset(documents_path).schema, record.get(STORE_COLUMNS_KEY, []))


def _store_serves(documents: pa.Schema, kept: list[str]) -> bool:
    """Whether stores that keep the documents' columns `kept` serve the run: each of `STORED_COLUMNS` it has kept."""
    return not set(STORED_COLUMNS) & set(documents.names) - set(kept)


def prepare_index(
    settings: RetrievalSettings, documents: str, output: str, resuming: bool, distributed: bool
) -> IndexPlan:
    """
    The run's index, before Ray starts: `--index` checked against the documents, or the index of the run this
    one resumes, or a new one: with `distributed` (the Ray engine) left for `complete_index` to build by Ray,
    else built in memory now (saved by `complete_index` once the output folder is claimed).

    :raises InputError: For an `--index` built from other documents or with other settings, or documents that
        cannot be indexed (none with content, no terms, bad ids), naming the option or file.
    """
    if settings.index is not None:  # the version it points to now (an updated index), for the whole run
        settings = replace(settings, index=current_version(settings.index))
        return IndexPlan(settings.index, {**check_given_index(settings, documents), "source": "given"})
    saved = saved_index(output)
    if resuming:
        record = read_json(saved, BUILD_FILE)
        if isinstance(record, dict) and not earlier_split(record):  # else built again, as this version builds it
            return IndexPlan(saved, {**summary(record), "source": "resumed"})
    if distributed:
        return IndexPlan(saved, {"source": "built"}, pending=True)
    built = build_index(settings, documents)
    return IndexPlan(saved, {**summary(built.record), "source": "built"}, built=built)


def saved_index(output: str) -> str:
    """Where a run saves the index it builds: `INDEX_FOLDER` in its output folder (`output`, a path or URI)."""
    return f"{output.rstrip('/')}/{INDEX_FOLDER}"


def complete_index(
    plan: IndexPlan, settings: RetrievalSettings, documents: str, engine: Engine, cluster: dict[str, Any]
) -> IndexPlan:
    """
    Once the output folder is claimed: saves an index the run built in memory into it (`plan.location`) and drops
    it from the driver, or builds a pending one there by Ray (`build_index_with_ray`); then adds the shards' filter
    fields (`jobs.indexing.filter_fields`) and completes the other parts that the run's retrieval method needs
    (`PART_BUILDERS`: for dense or hybrid retrieval, the passages' vectors and the approximate index,
    `vectors.complete_dense_part`).

    :raises InputError: If the documents cannot be indexed.
    """
    if plan.built is not None:
        write_index(plan.built, plan.location)
        plan = replace(plan, built=None)
    if plan.pending:
        record = build_index_with_ray(settings, documents, plan.location)
        plan = replace(plan, record={**summary(record), "source": "built"}, pending=False)
    if plan.record["source"] != "given" and FILTER_FIELDS_KEY not in plan.record:  # built, or resumed before kept
        fields = add_filter_fields(plan.location, plan.record, documents, settings.filter_fields)
        plan = replace(plan, record={**plan.record, FILTER_FIELDS_KEY: fields})
    for part in settings.method.added_parts:
        section = PART_BUILDERS[part](plan.location, plan.record, settings, documents, engine, cluster)
        plan = replace(plan, record={**plan.record, part: section})
    return plan
