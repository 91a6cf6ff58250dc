"""
The ingestion benchmark on a tiny folder (two files of each format): its counts per format, its rates and ratios
derived from the measured seconds, and its agreement with Haystack's texts. No timing is asserted. The Ray job is
replaced by a stand-in that returns our texts with one changed, so that the "ray" rows' agreement is shown to be
computed from what the job returns (the job itself is tests/jobs/test_ingest.py's).
"""

import json
from pathlib import Path

import pytest

from jobs.bench import ingest as bench
from jobs.bench.files import EXTENSIONS

FORMATS = ["txt", "markdown", "html", "pdf", "docx", "jsonl", "csv"]


def fake_ray_job(root: Path, output: Path) -> bench.Side:
    """
    Stands in for `python -m jobs.ingest`: our texts, the first CSV document's changed, 4 s; run again over its
    output (the update), 2 s and the files counted as the folder listed against the first run's.
    """
    side = bench.ours(root, bench.by_format(root))
    first_csv = sorted(path for path in side.texts if path.endswith(".csv"))[0]
    side.texts[first_csv][0] += " (changed)"
    manifest = {"files_converted": 14, "documents": 0, "report_rows": 0, "timings": {"convert_s": 3.0}}
    listed = {path: (root / path).read_bytes() for path in side.texts}
    earlier = json.loads(output.read_text()) if output.exists() else None
    output.write_text(json.dumps({path: data.hex() for path, data in listed.items()}))
    if earlier is None:
        return bench.Side("ray", {"all": 4.0}, side.texts, manifest)
    changed = sum(path in earlier and earlier[path] != data.hex() for path, data in listed.items())
    new = sum(path not in earlier for path in listed)
    counts = {"files_new": new, "files_changed": changed, "files_deleted": len(earlier.keys() - listed.keys())}
    counts["files_unchanged"] = len(listed) - new - changed
    manifest = {**manifest, **counts, "timings": {"convert_s": 1.0}}
    return bench.Side("ray", {"all": 2.0}, side.texts, manifest)


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    output = tmp_path_factory.mktemp("bench_ingest") / "ingest.json"
    patch = pytest.MonkeyPatch()
    patch.setattr(bench, "ray_job", fake_ray_job)
    try:
        found = bench.main(["--files", "14", "--output", str(output)])
    finally:
        patch.undo()
    assert json.loads(output.read_text())["rows"] == found["rows"]
    return found


def rows_of(result: dict, side: str) -> dict[str, dict]:
    return {row["format"]: row for row in result["rows"] if row["side"] == side}


def test_every_format_two_files_and_the_documents_they_hold(result: dict) -> None:
    assert len(EXTENSIONS) == len(FORMATS)
    ours, theirs = rows_of(result, "ours"), rows_of(result, "haystack")
    assert list(ours) == list(theirs) == FORMATS + ["all"]
    for fmt in FORMATS:
        assert ours[fmt]["files"] == theirs[fmt]["files"] == 2, fmt
        single = fmt not in ("jsonl", "csv")  # one document per file, else 3 to 9 rows each
        assert (ours[fmt]["documents"] == 2) if single else (6 <= ours[fmt]["documents"] <= 18), fmt
        assert ours[fmt]["documents"] == theirs[fmt]["documents"] == ours[fmt]["haystack_documents"], fmt
    for rows in (ours, theirs):
        for key in ("files", "documents", "seconds", "mb"):
            assert rows["all"][key] == pytest.approx(sum(rows[fmt][key] for fmt in FORMATS)), key
    assert ours["all"]["files"] == 14 and ours["all"]["mb"] > 0


def test_rates_and_ratios_follow_from_the_seconds(result: dict) -> None:
    ours, theirs = rows_of(result, "ours"), rows_of(result, "haystack")
    for rows in (ours, theirs, rows_of(result, "ray")):
        for row in rows.values():
            assert row["files_per_s"] == pytest.approx(row["files"] / row["seconds"])
            assert row["mb_per_s"] == pytest.approx(row["mb"] / row["seconds"])
    for fmt, row in ours.items():
        assert row["vs_haystack"] == pytest.approx(theirs[fmt]["seconds"] / row["seconds"]), fmt
        assert theirs[fmt]["vs_haystack"] == pytest.approx(1.0)
    ray = rows_of(result, "ray")
    assert list(ray) == ["all"]  # the job converts the whole folder at once: no per-format split
    assert ray["all"]["seconds"] == 4.0 and ray["all"]["vs_haystack"] == pytest.approx(theirs["all"]["seconds"] / 4.0)
    assert result["ray_job"]["convert_s"] == 3.0


def test_the_update_changes_a_share_of_the_files_and_reports_what_the_job_counted(result: dict) -> None:
    """14 files: every 100th (the first) changed; the stand-in counts against the first run's files."""
    update = result["update"]
    assert update["made"] == {"changed": 1, "new": 0, "deleted": 0}
    assert update["counted"] == {"new": 0, "changed": 1, "unchanged": 13, "deleted": 0}
    assert (update["seconds"], update["vs_first"], update["convert_s"], update["first_convert_s"]) == (2.0, 0.5, 1.0, 3.0)


def test_agreement_counts_equal_texts_per_file(result: dict) -> None:
    for side in ("ours", "haystack"):
        for fmt, row in rows_of(result, side).items():
            assert row["equal_texts"] == row["documents"] == row["haystack_documents"], (side, fmt)
    ray = rows_of(result, "ray")["all"]
    assert (ray["equal_texts"], ray["documents"]) == (ray["haystack_documents"] - 1, ray["haystack_documents"])


def test_the_table_prints_every_row() -> None:
    row = {
        "side": "ours", "format": "pdf", "files": 1200, "mb": 1.5, "documents": 1200, "seconds": 2.0,
        "files_per_s": 600.0, "mb_per_s": 0.75, "haystack_documents": 1200, "equal_texts": 1199, "vs_haystack": 1.25,
    }  # fmt: skip
    lines = bench.format_table([row, {**row, "side": "ray", "vs_haystack": None, "equal_texts": None}]).splitlines()
    assert lines[2] == "| ours | pdf | 1,200 | 1.50 | 1,200 | 2.000 | 600 | 0.75 | 1.25 | 1,199 / 1,200 |"
    assert lines[3] == "| ray | pdf | 1,200 | 1.50 | 1,200 | 2.000 | 600 | 0.75 |  |  |"


def test_an_unknown_side_to_skip_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--files", "1", "--skip", "ours"])
