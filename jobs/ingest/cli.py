"""
Converts a folder of files into a documents table for the bulk job, as a Ray Data stage:

    python -m jobs.ingest --input DIR --output OUT [--strict] [--split-by word --split-length N --split-overlap N]
        [--remove-empty-lines] [--remove-extra-whitespaces] [...cleaner flags] [--address ADDRESS] [--verbose]

The driver lists the files, never outside DIR (symbolic links followed only with `--follow-symlinks`, and only
inside it); Ray Data tasks convert them (`qa_core.ingest`: .txt, .md, .html/.htm, .pdf, .docx, .jsonl, .csv), each
file in a converter process bounded in time and memory (`--timeout-per-file`, `--memory-per-file`), clean and split
them, up to `--files-per-task` files and `--bytes-per-task` bytes per task, streaming into Parquet
(`jobs.ingest.run`).
OUT receives `documents/` (the bulk job's `--documents`: `id`, `content`, `page_number`, and the meta as columns and
as JSON), `report.parquet` (path, line, reason: every file or row that gave no document, every entry the listing
skipped), `files.parquet` (each file's size, modification time and content hash) and `manifest.json` (counts that
reconcile: files in = files converted + files rejected; entries skipped; files new, changed, unchanged, deleted).
Run again over the same OUT, it converts only the files new or changed since (`jobs.ingest.run`), unless OUT was
made with other conversion settings (refused, naming the setting) or `--overwrite` is given.
The ingestion and cleaning options are the bulk job's (`IngestSettings`, `CleanerSettings`: one definition, the
same flags). Exit status: 0 when written (with report rows, unless `--strict`), 2 for unusable input or options,
two documents with one id, or any report row with `--strict` (the report and manifest are written, the documents
are not).
"""

import argparse
import dataclasses
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from jobs.engines import RayEngine
from jobs.ingest.folder import InputFolder, list_folder
from jobs.ingest.run import (
    DOCUMENTS_DIR,
    MANIFEST_FILE,
    REPORT_FILE,
    STAGING_DIR,
    WRITTEN,
    IngestError,
    check_earlier,
    ingest,
    where,
)
from jobs.ingest.stage import IngestSettings, SplitSettings
from jobs.options import add_options
from jobs.ray_logs import RAY_AUTH_SETUP_LOGGER, RayLogFilter, quiet_ray_data
from jobs.shared_paths import SharedPath, check_shared
from jobs.storage import InputError
from qa_core.ingest import CleanerSettings
from qa_core.ingest.convert import missing_libraries
from qa_core.retrieval.splitter import SPLIT_BY

# Report rows printed on the terminal (all of them are in report.parquet).
SHOWN_REPORT_ROWS = 20


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jobs.ingest", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--input", required=True, help="folder of files to convert (read by every Ray worker)")
    parser.add_argument("--output", required=True, help="folder to write documents/, report.parquet, manifest.json")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="convert every file again, replacing an earlier output (else it is updated: only new and changed files "
        "are converted)",
    )
    split = parser.add_argument_group("splitting (Haystack's DocumentSplitter)")
    split.add_argument("--split-by", choices=SPLIT_BY, default="word", help="the unit of --split-length")
    split.add_argument("--split-length", type=int, default=None, help="units per passage (default: whole documents)")
    split.add_argument("--split-overlap", type=int, default=0, help="units shared by consecutive passages")
    split.add_argument("--split-threshold", type=int, default=0, help="a shorter last passage joins the previous one")
    add_options(parser, {"ingest": IngestSettings(), "cleaning": CleanerSettings()})
    parser.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else a local Ray)")
    parser.add_argument(
        "--verbose", action="store_true", help="also show Ray's own logs and Ray Data's progress bars and log lines"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    with RayLogFilter() as ray_logs:  # without --verbose, Ray's C++ log lines are kept out of stderr while Ray runs
        return _ingest(args, ray_logs)


def _ingest(args: argparse.Namespace, ray_logs: RayLogFilter) -> int:
    """Converts the folder the parsed command line names; returns the exit status."""
    try:
        missing = missing_libraries()
        if missing:
            extra = "pip install 'ray-extractive-qa[files]'"
            raise IngestError(f"missing libraries {', '.join(missing)}: install the files extra ({extra}).")
        settings, cleaner, split = _settings(args)
        output = _prepare_output(Path(args.output), args.overwrite)
        check_earlier(str(output), settings, cleaner, split)
        folder = _list(args.input, settings.follow_symlinks)
        started = time.perf_counter()
        cpus = _start_ray(args.address, args.verbose, ray_logs)
        timings = {"ray_start_s": round(time.perf_counter() - started, 3)}
        # Ray Data's tasks read the files and write the output on any node of a cluster: the same on every node.
        check_shared(
            [SharedPath("--input", args.input), SharedPath("--output", str(output), written=True)], "jobs.ingest"
        )
        manifest = ingest(folder, str(output), settings, cleaner, split, RayEngine(), cpus, timings)
    except (IngestError, ValueError, InputError) as error:  # InputError: a path not shared by every node
        print(f"jobs.ingest: error: {error}", file=sys.stderr)
        return 2
    _print_summary(manifest, output)
    return 2 if manifest["status"] != WRITTEN else 0


def _start_ray(address: str | None, verbose: bool, ray_logs: RayLogFilter) -> float:
    """
    Starts or joins Ray (this process's own, if already running); returns its CPUs. Without `verbose`, Ray's C++
    log lines (`ray_logs`, started first), its workers' output and Ray Data's log lines and progress bars are kept
    off the terminal, as the bulk job keeps them.
    """
    import ray

    if not verbose:
        ray_logs.start()
    if not ray.is_initialized():  # else this process's own Ray is used, as it is
        address = address or os.environ.get("RAY_ADDRESS") or "local"
        # A Ray of its own (never one someone started with `ray start`) needs no dashboard: nothing submits to it.
        dashboard = False if address == "local" else None
        level = logging.INFO if verbose else logging.WARNING
        logging.getLogger(RAY_AUTH_SETUP_LOGGER).setLevel(level if verbose else logging.ERROR)
        ray.init(address=address, log_to_driver=verbose, logging_level=level, include_dashboard=dashboard)
    quiet_ray_data(verbose)
    return ray.cluster_resources().get("CPU", 1.0)


def _settings(args) -> tuple[IngestSettings, CleanerSettings, SplitSettings]:
    """The options given, each group's settings checked (all problems at once)."""
    values = vars(args)
    settings, cleaner = (
        dataclasses.replace(phase, **{name: values[name] for name in phase.types() if name in values})
        for phase in (IngestSettings(), CleanerSettings())
    )
    problems = settings.problems() + cleaner.problems()
    if args.split_length is None:
        if args.split_overlap or args.split_threshold:
            problems.append("--split-overlap and --split-threshold need --split-length")
    elif args.split_length < 1 or not 0 <= args.split_overlap < args.split_length or args.split_threshold < 0:
        problems.append(
            f"--split-length must be at least 1 and --split-overlap at least 0 and less than it, --split-threshold "
            f"at least 0 (not {args.split_length}, {args.split_overlap}, {args.split_threshold})"
        )
    if problems:
        raise IngestError("; ".join(problems) + ".")
    return settings, cleaner, SplitSettings(args.split_by, args.split_length, args.split_overlap, args.split_threshold)


def _list(folder: str, follow_symlinks: bool) -> InputFolder:
    try:
        return list_folder(folder, follow_symlinks)
    except FileNotFoundError:
        raise IngestError(f"--input {folder}: no such folder.") from None


def _prepare_output(output: Path, overwrite: bool) -> Path:
    """The output folder, made; an earlier ingestion's output there is kept (updated), or with `overwrite` deleted."""
    if output.exists():
        if not output.is_dir():
            raise IngestError(f"--output {output}: exists and is not a folder.")
        names = {path.name for path in output.iterdir()}
        if names and not names & {MANIFEST_FILE, STAGING_DIR}:
            raise IngestError(
                f"--output {output}: the folder holds files but no {MANIFEST_FILE}: it is not an earlier "
                "ingestion's output, which is updated (or with --overwrite replaced). Choose a new or empty folder."
            )
        if names and overwrite:
            shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    return output


def _print_summary(manifest: dict, output: Path) -> None:
    report = pq.read_table(output / REPORT_FILE).to_pylist()
    for row in report[:SHOWN_REPORT_ROWS]:
        print(f"jobs.ingest: {where(row)}: {row['reason']}", file=sys.stderr)
    if len(report) > SHOWN_REPORT_ROWS:
        print(f"jobs.ingest: ... {len(report) - SHOWN_REPORT_ROWS} more in {output / REPORT_FILE}", file=sys.stderr)
    if manifest["status"] == WRITTEN:
        split = f" as {manifest['rows_written']} passages" if manifest["settings"]["split"]["split_length"] else ""
        print(
            f"jobs.ingest: {manifest['files']} files: {manifest['files_converted']} converted into "
            f"{manifest['documents']} documents{split} in {output / DOCUMENTS_DIR}, {manifest['files_rejected']} "
            f"rejected; {manifest['report_rows']} report rows in {output / REPORT_FILE}",
            flush=True,
        )
        print(
            f"jobs.ingest: since the earlier output: {manifest['files_new']} files new, {manifest['files_changed']} "
            f"changed (both converted), {manifest['files_unchanged']} unchanged (kept), {manifest['files_deleted']} "
            "deleted",
            flush=True,
        )
    else:
        print(
            f"jobs.ingest: error: --strict: {manifest['report_rows']} report rows (in {output / REPORT_FILE}); "
            "no documents written.",
            file=sys.stderr,
        )


__all__ = ["build_parser", "main"]
