"""
Converts a folder of files into a documents table for the bulk job, as a Ray Data stage:

    python -m jobs.ingest --input DIR --output OUT [--strict] [--split-by word --split-length N --split-overlap N]
        [--remove-empty-lines] [--remove-extra-whitespaces] [...cleaner flags] [--address ADDRESS]

The driver lists the files; Ray Data tasks convert them (`qa_core.ingest`: .txt, .md, .html/.htm, .pdf, .docx,
.jsonl, .csv), clean and split them, `--files-per-task` files per task, streaming into Parquet. OUT receives
`documents/` (the bulk job's `--documents`: `id`, `content`, `page_number`, and the meta as columns and as JSON),
`report.parquet` (path, line, reason: every file or row that gave no document) and `manifest.json` (counts that
reconcile: files in = files converted + files rejected). Exit status: 0 when written (with report rows, unless
`--strict`), 2 for unusable input or options, two documents with one id, or any report row with `--strict` (the
report and manifest are written, the documents are not).
"""

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from jobs.ingest.stage import REPORT_SCHEMA, SplitSettings, StageSettings, convert_batch
from qa_core.ingest import CleanerSettings, RowColumns
from qa_core.ingest.convert import missing_libraries
from qa_core.ingest.sources import list_files
from qa_core.retrieval.splitter import SPLIT_BY

DOCUMENTS_DIR = "documents"
REPORT_FILE = "report.parquet"
MANIFEST_FILE = "manifest.json"
# Where the stage streams documents and report parts before the id check and `--strict` allow them out.
STAGING_DIR = "_staging"
# Report rows printed on the terminal (all of them are in report.parquet).
SHOWN_REPORT_ROWS = 20


class IngestError(Exception):
    """Unusable input or options, or a corpus that cannot be written; the message names the file or option."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jobs.ingest", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--input", required=True, help="folder of files to convert (read by every Ray worker)")
    parser.add_argument("--output", required=True, help="folder to write documents/, report.parquet, manifest.json")
    parser.add_argument("--strict", action="store_true", help="exit 2 without writing documents on any report row")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    parser.add_argument("--content-column", default="content", help="JSONL/CSV column holding the text")
    parser.add_argument("--id-column", default="id", help="JSONL/CSV column holding the id, where present")
    split = parser.add_argument_group("splitting (Haystack's DocumentSplitter)")
    split.add_argument("--split-by", choices=SPLIT_BY, default="word", help="the unit of --split-length")
    split.add_argument("--split-length", type=int, default=None, help="units per passage (default: whole documents)")
    split.add_argument("--split-overlap", type=int, default=0, help="units shared by consecutive passages")
    split.add_argument("--split-threshold", type=int, default=0, help="a shorter last passage joins the previous one")
    clean = parser.add_argument_group("cleaning (Haystack's DocumentCleaner options, all off by default)")
    for flag in ("remove-empty-lines", "remove-extra-whitespaces", "remove-repeated-substrings", "strip-whitespaces",
                 "ascii-only"):  # fmt: skip
        clean.add_argument(f"--{flag}", action="store_true")
    clean.add_argument("--unicode-normalization", choices=("NFC", "NFKC", "NFD", "NFKD"), default=None)
    clean.add_argument("--remove-substring", action="append", default=[], help="repeatable")
    clean.add_argument("--remove-regex", default=None)
    clean.add_argument("--replace-regex", nargs=2, action="append", default=[], metavar=("PATTERN", "REPLACEMENT"))
    run = parser.add_argument_group("Ray")
    run.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else a local Ray)")
    run.add_argument("--files-per-task", type=int, default=16, help="files one conversion task converts")
    run.add_argument("--cpus-per-task", type=float, default=1.0, help="CPUs a conversion task reserves")
    run.add_argument(
        "--timeout-per-file", type=float, default=300.0, help="seconds one file's conversion may take (0: no limit)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        missing = missing_libraries()
        if missing:
            extra = "pip install 'ray-extractive-qa[files]'"
            raise IngestError(f"missing libraries {', '.join(missing)}: install the files extra ({extra}).")
        settings = _settings(args)
        output = _prepare_output(Path(args.output), args.overwrite)
        paths = _list(args.input)
        manifest = run(paths, settings, output, args)
    except (IngestError, ValueError) as error:
        print(f"jobs.ingest: error: {error}", file=sys.stderr)
        return 2
    _print_summary(manifest, output)
    return 2 if manifest["status"] != "written" else 0


def run(paths: list[str], settings: StageSettings, output: Path, args) -> dict:
    """The stage on Ray, then the id check, the report and the manifest; the documents moved out unless refused."""
    import ray

    started = time.perf_counter()
    staging = output / STAGING_DIR
    (staging / "report").mkdir(parents=True)
    if not ray.is_initialized():  # else this process's own Ray is used, as it is
        address = args.address or os.environ.get("RAY_ADDRESS") or "local"
        # A Ray of its own (never one someone started with `ray start`) needs no dashboard: nothing submits to it.
        ray.init(address=address, log_to_driver=False, include_dashboard=False if address == "local" else None)
    if paths:
        dataset = ray.data.from_items([{"path": path} for path in paths], override_num_blocks=_blocks(paths, args))
        dataset = dataset.map_batches(
            convert_batch,
            fn_kwargs={"settings": settings},
            batch_size=args.files_per_task,
            batch_format="numpy",
            num_cpus=args.cpus_per_task,
        )
        dataset.write_parquet(str(staging / "documents"))
    convert_s = time.perf_counter() - started
    sources = _sources(staging / "documents")
    report = _read_report(staging / "report")
    pq.write_table(report, output / REPORT_FILE)
    manifest = _manifest(paths, sources, report, settings, args)
    manifest["timings"] = {"convert_s": round(convert_s, 3)}
    duplicate = _duplicate_id(sources)
    if duplicate:
        manifest["status"] = "refused: duplicate id"
        manifest["error"] = duplicate
    elif args.strict and report.num_rows:
        manifest["status"] = "refused: --strict and report rows"
    else:
        manifest["status"] = "written"
        target = output / DOCUMENTS_DIR
        if (staging / "documents").exists():
            os.replace(staging / "documents", target)
        else:
            target.mkdir()  # no files: an empty documents folder
    shutil.rmtree(staging)
    (output / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    if duplicate:
        raise IngestError(duplicate)
    return manifest


def _settings(args) -> StageSettings:
    if args.files_per_task < 1:
        raise IngestError(f"--files-per-task must be at least 1, not {args.files_per_task}.")
    if args.timeout_per_file < 0:
        raise IngestError(f"--timeout-per-file must be at least 0, not {args.timeout_per_file}.")
    if args.cpus_per_task <= 0:
        raise IngestError(f"--cpus-per-task must be greater than 0, not {args.cpus_per_task}.")
    if args.split_length is None:
        if args.split_overlap or args.split_threshold:
            raise IngestError("--split-overlap and --split-threshold need --split-length.")
    elif args.split_length < 1 or not 0 <= args.split_overlap < args.split_length or args.split_threshold < 0:
        raise IngestError(
            f"--split-length must be at least 1 and --split-overlap at least 0 and less than it, --split-threshold "
            f"at least 0 (not {args.split_length}, {args.split_overlap}, {args.split_threshold})."
        )
    cleaner = CleanerSettings(
        unicode_normalization=args.unicode_normalization,
        ascii_only=args.ascii_only,
        remove_extra_whitespaces=args.remove_extra_whitespaces,
        remove_empty_lines=args.remove_empty_lines,
        remove_substrings=tuple(args.remove_substring),
        remove_regex=args.remove_regex,
        replace_regexes=dict(args.replace_regex),
        remove_repeated_substrings=args.remove_repeated_substrings,
        strip_whitespaces=args.strip_whitespaces,
    )
    split = SplitSettings(args.split_by, args.split_length, args.split_overlap, args.split_threshold)
    root = str(Path(args.input).resolve())
    report_dir = str((Path(args.output) / STAGING_DIR / "report").resolve())
    columns = RowColumns(args.content_column, args.id_column)
    return StageSettings(root, report_dir, args.timeout_per_file or None, columns, cleaner, split)


def _list(folder: str) -> list[str]:
    try:
        return list_files(folder)
    except FileNotFoundError:
        raise IngestError(f"--input {folder}: no such folder.") from None


def _prepare_output(output: Path, overwrite: bool) -> Path:
    if output.exists():
        if not output.is_dir():
            raise IngestError(f"--output {output}: exists and is not a folder.")
        names = {path.name for path in output.iterdir()}
        if names:
            if not overwrite:
                raise IngestError(f"--output {output}: the folder is not empty; pass --overwrite to replace it.")
            if not names & {MANIFEST_FILE, STAGING_DIR}:
                raise IngestError(
                    f"--output {output}: the folder holds files but no {MANIFEST_FILE}: it is not an earlier "
                    "ingestion's output, and --overwrite replaces only those. Choose a new or empty folder."
                )
            shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    return output


def _blocks(paths: list[str], args) -> int:
    return max(1, -(-len(paths) // args.files_per_task))


def _sources(documents: Path):
    """Each document's (source_id, file_path, line), read from the written table's columns only."""
    if not documents.exists() or not any(documents.glob("*.parquet")):
        return None
    return pads.dataset(str(documents), format="parquet").to_table(columns=["source_id", "file_path", "line"])


def _duplicate_id(sources) -> str | None:
    """A message naming an id that two sources gave, with both, or `None`."""
    if sources is None or sources.num_rows == 0:
        return None
    distinct = sources.group_by(["source_id", "file_path", "line"]).aggregate([])
    counts = distinct.group_by("source_id").aggregate([("file_path", "count")])
    repeated = counts.filter(pc.greater(counts["file_path_count"], 1))
    if repeated.num_rows == 0:
        return None
    doc_id = repeated["source_id"][0].as_py()
    rows = distinct.filter(pc.equal(distinct["source_id"], doc_id))
    rows = rows.sort_by([("file_path", "ascending"), ("line", "ascending")])
    first, second = [_where(row) for row in rows.to_pylist()[:2]]
    return f"Two documents have the id {doc_id!r}: {first} and {second}."


def _where(row: dict) -> str:
    return row["file_path"] if row["line"] is None else f"{row['file_path']} line {row['line']}"


def _read_report(folder: Path):
    parts = sorted(folder.glob("*.parquet"))
    if not parts:
        return REPORT_SCHEMA.empty_table()
    table = pads.dataset([str(part) for part in parts], format="parquet", schema=REPORT_SCHEMA).to_table()
    return table.sort_by([("path", "ascending"), ("line", "ascending")])


def _manifest(paths: list[str], sources, report, settings: StageSettings, args) -> dict:
    converted = set() if sources is None else set(sources["file_path"].to_pylist())
    source_ids = 0 if sources is None else len(set(sources["source_id"].to_pylist()))
    rejected = sorted(set(paths) - converted)
    reported_files = set(report["path"].to_pylist())
    return {
        "input": str(Path(args.input).resolve()),
        "files": len(paths),
        "files_converted": len(converted),
        "files_rejected": len(rejected),
        "reconciles": len(paths) == len(converted) + len(rejected) and set(rejected) <= reported_files,
        "documents": source_ids,
        "rows_written": 0 if sources is None else sources.num_rows,
        "report_rows": report.num_rows,
        "report_rows_for_files_converted": sum(1 for path in report["path"].to_pylist() if path in converted),
        "settings": {
            "columns": asdict(settings.columns),
            "cleaner": asdict(settings.cleaner),
            "split": asdict(settings.split),
            "files_per_task": args.files_per_task,
            "timeout_per_file": args.timeout_per_file,
            "strict": args.strict,
        },
    }


def _print_summary(manifest: dict, output: Path) -> None:
    report = pq.read_table(output / REPORT_FILE).to_pylist()
    for row in report[:SHOWN_REPORT_ROWS]:
        where = row["path"] if row["line"] is None else f"{row['path']} line {row['line']}"
        print(f"jobs.ingest: {where}: {row['reason']}", file=sys.stderr)
    if len(report) > SHOWN_REPORT_ROWS:
        print(f"jobs.ingest: ... {len(report) - SHOWN_REPORT_ROWS} more in {output / REPORT_FILE}", file=sys.stderr)
    if manifest["status"] == "written":
        split = f" as {manifest['rows_written']} passages" if manifest["settings"]["split"]["split_length"] else ""
        print(
            f"jobs.ingest: {manifest['files']} files: {manifest['files_converted']} converted into "
            f"{manifest['documents']} documents{split} in {output / DOCUMENTS_DIR}, {manifest['files_rejected']} "
            f"rejected; {manifest['report_rows']} report rows in {output / REPORT_FILE}",
            flush=True,
        )
    else:
        print(
            f"jobs.ingest: error: --strict: {manifest['report_rows']} report rows (in {output / REPORT_FILE}); "
            "no documents written.",
            file=sys.stderr,
        )


__all__ = ["build_parser", "main", "run"]
