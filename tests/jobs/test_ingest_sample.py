"""The sample folder `data/sample/files/`: jobs.ingest's conversion stage, run in-process (no Ray), converts every
file of it, every format there, with no report row."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.ingest.stage import StageSettings, convert_batch
from qa_core.ingest import FORMATS
from qa_core.ingest.sources import list_files

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "files"


def test_every_sample_file_converts_with_no_report_row(tmp_path: Path) -> None:
    paths = list_files(SAMPLE)
    assert {FORMATS[Path(path).suffix] for path in paths} == set(FORMATS.values())  # every format, known extensions
    for path in paths:
        assert (SAMPLE / path).stat().st_size < 40_000, path  # small files (a DOCX is mostly python-docx's template)
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    rows = convert_batch(pa.table({"path": paths}), StageSettings(str(SAMPLE), str(report_dir), timeout_s=60.0))
    assert list(report_dir.iterdir()) == []  # no report rows: the stage writes none
    assert set(rows["file_path"].to_pylist()) == set(paths)
    assert rows["id"].to_pylist() and len(set(rows["id"].to_pylist())) == rows.num_rows
    assert all(content.strip() for content in rows["content"].to_pylist())
    pq.write_table(rows, tmp_path / "documents.parquet")  # the stage's rows are a writable documents table
