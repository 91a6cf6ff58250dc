"""The sample folder `data/sample/files/`: jobs.ingest's conversion stage, run in-process (no Ray), converts every
file of it, every format there, with no report row."""

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.ingest.stage import PARQUET_OPTIONS, RECORD_SCHEMA, StageSettings, convert_batch, convert_rows, part_name
from jobs.ingest.stage import read_part
from qa_core.ingest import FORMATS, ConversionOptions
from qa_core.ingest.sources import ListingOpener, list_files
from tests.qa_core.ingest.files import pdf_bytes

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "files"


def test_every_sample_file_converts_with_no_report_row(tmp_path: Path) -> None:
    paths = list_files(SAMPLE)
    assert {FORMATS[Path(path).suffix] for path in paths} == set(FORMATS.values())  # every format, known extensions
    for path in paths:
        assert (SAMPLE / path).stat().st_size < 40_000, path  # small files (a DOCX is mostly python-docx's template)
    sizes = [(SAMPLE / path).stat().st_size for path in paths]
    batch = pa.table({"path": paths, "size": sizes, "mtime_ns": [0] * len(paths), "sha256": [None] * len(paths)},
                     schema=RECORD_SCHEMA)  # fmt: skip
    files = convert_batch(batch, StageSettings(str(SAMPLE), str(tmp_path), ConversionOptions(timeout_s=60.0)))
    part = read_part(pafs.LocalFileSystem(), str(tmp_path / part_name(batch)))
    assert part.report == []  # no report rows
    assert part.files.equals(files) and files["converted"].to_pylist() == [True] * len(paths)
    assert files["sha256"].to_pylist() == [hashlib.sha256((SAMPLE / path).read_bytes()).hexdigest() for path in paths]
    rows = pq.read_table(part.path)
    assert set(rows["file_path"].to_pylist()) == set(paths)
    assert rows["id"].to_pylist() and len(set(rows["id"].to_pylist())) == rows.num_rows
    assert all(content.strip() for content in rows["content"].to_pylist())


def test_a_pdf_above_utf8_above_gives_the_same_rows_and_parquet_from_its_utf8(tmp_path: Path) -> None:
    """A large PDF's row (its own chunk of `content`, on the converter's buffer) between small files' rows."""
    root = tmp_path / "in"
    root.mkdir()
    data = pdf_bytes([f"Page {i}: caf\u00e9 words\u2019 text." * 30 if i % 5 else "" for i in range(40)])
    (root / "big.pdf").write_bytes(data)
    (root / "a.txt").write_text("First.\n")
    (root / "b.txt").write_text("Last.\n")
    paths = ["a.txt", "big.pdf", "b.txt"]
    whole, large = [
        convert_rows(str(root), paths, ListingOpener(str(root), {}), StageSettings(str(root), "", utf8_above=above))[0]
        for above in (None, len(data) - 1)
    ]
    assert whole["content"].num_chunks == 1 and large["content"].num_chunks == 3
    assert large.equals(whole)
    assert large["content"][1].as_py().count("\f") == 39 and large["pages"][1].as_py() == 40
    pq.write_table(large, tmp_path / "documents.parquet", **PARQUET_OPTIONS)
    assert pq.read_table(tmp_path / "documents.parquet").equals(whole)
