"""Fixtures for the job tests: one local Ray per test module, small real-text inputs, and a job runner."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.bulk_qa import main

TEXTS = [json.loads(line)["text"] for line in Path("data/text/python_stdlib_docs.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance shared by the tests of one module (2 CPUs, as on the project's machines)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def write_table(path: Path, columns: dict, schema: pa.Schema | None = None) -> str:
    """Writes a Parquet file and returns its path as a string."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns, schema=schema), path)
    return str(path)


def read_output(output: Path, table: str) -> list[dict]:
    """An output table's rows (nulls as None), sorted by question and then rank or reply."""
    rows = pq.read_table(output / table).to_pylist()
    keys = [key for key in ("question_id", "rank", "reply_index") if rows and key in rows[0]]
    return sorted(rows, key=lambda row: [row[key] for key in keys])


def by_question(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by question id, in order."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["question_id"], []).append(row)
    return grouped


def run_job(*args: str) -> int:
    """Runs the job in-process (it joins the module's Ray) and returns its exit status."""
    return main([str(arg) for arg in args])
