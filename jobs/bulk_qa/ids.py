"""
The id check, before any answering: every id column must hold unique, non-null, non-empty values, and how many
questions each output shard holds is counted. Id columns of up to `DRIVER_CHECK_MAX_ROWS` rows in all are
checked in the driver with pyarrow, before Ray starts (reading the id columns only); larger ones by one Ray Data
shuffle over all the tables. Both give the same counts and the same messages.
"""

from collections import Counter
from typing import Any

import pyarrow as pa

from jobs.bulk_qa.workers.rows import shard_of
from jobs.storage import InputError, redact
from jobs.tables import TableSpec

# Id columns of at most this many rows in all (questions, documents and replies) are checked in the driver: tens
# of MB of ids at most, read in about a second, where a shuffle on the cluster costs seconds of fixed overhead.
DRIVER_CHECK_MAX_ROWS = 1_000_000

# What the id check returns per batch of (table, id, count) groups: rows with a `shard` count the rows of `table`
# that hash to that shard; rows without one are problem ids (and, without a `table`, how many were left out).
_ID_SUMMARY_SCHEMA = pa.schema(
    [("table", pa.string()), ("id", pa.string()), ("rows", pa.int64()), ("shard", pa.int32())]
)
_PROBLEMS_SHOWN = 20


def _summarise_ids(counts: pa.Table, num_shards: int) -> pa.Table:
    """
    Of a batch of (table, id, rows) groups: one row per table and shard with how many of the table's ids hash to
    it (questions and replies), and the first ids that are null, empty or repeated, with a count of the problems
    left out as one more row.
    """
    shards: Counter[tuple[str, int]] = Counter()
    problems = []
    for table, id_, rows in zip(*(counts[name].to_pylist() for name in ("table", "id", "count()")), strict=True):
        if not id_ or rows > 1:  # null, empty (a Document would replace it with a hash) or repeated
            problems.append({"table": table, "id": id_, "rows": rows})
        elif table != "documents":
            shards[table, shard_of(id_, num_shards)] += 1
    summary = [{"table": table, "shard": shard, "rows": rows} for (table, shard), rows in shards.items()]
    summary += problems[:_PROBLEMS_SHOWN]
    if len(problems) > _PROBLEMS_SHOWN:
        summary.append({"rows": len(problems) - _PROBLEMS_SHOWN})
    return pa.Table.from_pylist(summary, schema=_ID_SUMMARY_SCHEMA)


def check_ids(datasets: list[tuple[TableSpec, str, Any]], num_shards: int, partitions: int) -> dict[int, int]:
    """
    Fails when an id column holds nulls, empty strings or duplicates, else returns how many questions each shard
    holds. A shard that only replies hash to holds 0 questions: it is answered like the others, so that its
    replies are reported as replies without a question. Shards nothing hashes to are absent. One shuffle checks
    all the tables and counts the shards.

    :param datasets: (what the table holds, its path, its dataset) for each table.
    """
    from ray.data.expressions import lit

    tagged = [
        dataset.select_columns([spec.id_column])
        .rename_columns({spec.id_column: "id"})
        .with_column("table", lit(spec.name))
        for spec, _, dataset in datasets
    ]
    combined = tagged[0].union(*tagged[1:]) if len(tagged) > 1 else tagged[0]
    summary = (
        combined.groupby(["table", "id"], num_partitions=partitions)
        .count()
        .map_batches(_summarise_ids, batch_format="pyarrow", fn_kwargs={"num_shards": num_shards})
    )
    return _questions_per_shard(summary.iter_rows(), {spec.name: (path, spec.id_column) for spec, path, _ in datasets})


def check_ids_in_driver(tables: list[tuple[TableSpec, str, pa.ChunkedArray]], num_shards: int) -> dict[int, int]:
    """
    `check_ids` for id columns already in the driver (see `inputs.read_ids`): the same counts, the same messages.

    :param tables: (what the table holds, its path, its id column) for each table.
    """
    counts = []
    for spec, _, ids in tables:
        grouped = pa.table({"id": ids.cast(pa.string())}).group_by("id").aggregate([([], "count_all")])
        name = pa.array([spec.name] * grouped.num_rows, pa.string())
        counts.append(pa.table({"table": name, "id": grouped["id"], "count()": grouped["count_all"]}))
    summary = _summarise_ids(pa.concat_tables(counts), num_shards).to_pylist()
    return _questions_per_shard(summary, {spec.name: (path, spec.id_column) for spec, path, _ in tables})


def _questions_per_shard(summary: Any, where: dict[str, tuple[str, str]]) -> dict[int, int]:
    """
    The questions per shard of the summary rows (`_summarise_ids`'), or InputError naming every problem id.

    :param where: Each table's path and id column, by table name.
    """
    questions_per_shard: Counter[int] = Counter()
    problems, unshown = [], 0
    for row in summary:
        if row["shard"] is not None:
            questions_per_shard[row["shard"]] += row["rows"] if row["table"] == "questions" else 0
        elif row["table"] is None or len(problems) == _PROBLEMS_SHOWN:
            unshown += row["rows"] if row["table"] is None else 1
        else:
            problems.append(row)
    if not problems:
        return dict(questions_per_shard)
    lines = []
    for row in problems:
        path, column = where[row["table"]]
        what = {None: "a null value", "": "an empty value"}.get(row["id"], f"duplicate value {row['id']!r}")
        lines.append(f"{redact(path)}: column '{column}' of the {row['table']} table has {what} ({row['rows']} rows)")
    if unshown:
        lines.append(f"... and {unshown} more null, empty or duplicate ids")
    raise InputError("Input ids must be unique, not null and not empty:\n  - " + "\n  - ".join(lines))
