"""
The ingestion's memory (prints only): `python -m jobs.ingest` on a local Ray of its own, its peak memory (the
command and every process under it: Ray's own and its workers, sampled every 0.25 s; the sum of their resident
memory, which counts a shared page once in every process mapping it, Ray's object store among them, and the sum of
their proportional set sizes, which shares each such page out among them, so that it is counted once) for
(a) many small files (`jobs.bench.files.write_mixed_folder`: every format), (b) one large PDF (pages of the
local text's words), and a DOCX zip bomb (`jobs.bench.files.write_docx_bomb`) (c) with the default limits (its
declared size over --max-unzipped-bytes) and (d) with no decompressed-size limit (stopped by the converter
process's --memory-per-file), each against the job's baseline: the same command on a folder of one small text file.

    .venv/bin/python -m jobs.bench.ingest_memory [--small-files 100000] [--pdf-mb 500] [--bomb-gb 2]
        [--skip small,pdf,bomb,bomb-memory] [--output memory.json]

The targets: under 2 GB above the baseline for 100,000 small files and for one 500 MB file; at most 4 GB above it
for any single hostile file, the 2 GB zip bomb among them.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from jobs.bench.files import write_docx_bomb, write_large_pdf, write_mixed_folder

REPOSITORY = Path(__file__).resolve().parents[2]  # where `python -m jobs.ingest` runs
SAMPLE_S = 0.25  # reading every process's proportional set size walks its page tables: not much more often
CASES = ("small", "pdf", "bomb", "bomb-memory")
# The bomb case without a decompressed-size limit: only the converter process's address space stops it.
NO_UNZIPPED_LIMIT = ["--max-unzipped-bytes", str(2**62)]


def peak_memory(folder: Path, output: Path, options: list[str] | None = None) -> dict:
    """
    `python -m jobs.ingest` on `folder` (with `options` added): its seconds, its documents and report rows, and
    its process tree's peak memory (bytes): of the summed resident memory (`peak_bytes`) and of the summed
    proportional set sizes (`peak_pss_bytes`).
    """
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # No time limit per file: a large file's conversion is what is measured.
    command = [sys.executable, "-m", "jobs.ingest", "--input", str(folder), "--output", str(output), "--overwrite"]
    command += ["--timeout-per-file", "0", *(options or [])]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=REPOSITORY, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root, peak, peak_pss = psutil.Process(process.pid), 0, 0
    while process.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        rss = pss = 0
        for member in tree:
            try:
                memory = member.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            rss, pss = rss + memory.rss, pss + memory.pss
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        time.sleep(SAMPLE_S)
    seconds = time.perf_counter() - started
    stderr = process.stderr.read().decode(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(f"jobs.ingest exited {process.returncode}: {stderr[-2000:]}")
    manifest = json.loads((output / "manifest.json").read_text())
    return {
        "seconds": round(seconds, 1),
        "peak_bytes": peak,
        "peak_pss_bytes": peak_pss,
        "documents": manifest["documents"],
        "report_rows": manifest["report_rows"],
    }


def main(argv: list[str] | None = None) -> dict:
    """Measures the baseline and each case; prints one line each; returns (and with `--output` writes) them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-files", type=int, default=100_000, help="files of the many-small-files case")
    parser.add_argument("--pdf-mb", type=float, default=500.0, help="size of the large PDF, in MB")
    parser.add_argument("--bomb-gb", type=float, default=2.0, help="decompressed size of the DOCX zip bomb, in GB")
    parser.add_argument("--skip", default="", help=f"comma-separated cases to skip: {', '.join(CASES)}")
    parser.add_argument("--output", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    skip = {name for name in args.skip.split(",") if name}
    given = argv if argv is not None else sys.argv[1:]
    result = {"command": " ".join(["python -m jobs.bench.ingest_memory", *given]), "load_average": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench_ingest_memory_") as folder:
        work = Path(folder)
        (work / "one").mkdir()
        (work / "one" / "a.txt").write_text("One small file.\n")
        result["baseline"] = peak_memory(work / "one", work / "out-one")
        if "small" not in skip:
            write_mixed_folder(work / "small", args.small_files)
            result["small"] = {"files": args.small_files, **peak_memory(work / "small", work / "out-small")}
            result["small"]["input_mb"] = round(sum(p.stat().st_size for p in (work / "small").rglob("*")) / 1e6, 1)
        if "pdf" not in skip:
            (work / "pdf").mkdir()
            size = write_large_pdf(work / "pdf" / "large.pdf", args.pdf_mb)
            result["pdf"] = {"input_mb": round(size / 1e6, 1), **peak_memory(work / "pdf", work / "out-pdf")}
        if {"bomb", "bomb-memory"} - skip:
            (work / "bomb").mkdir()
            size = write_docx_bomb(work / "bomb" / "bomb.docx", int(args.bomb_gb * 1e9))
            for case, options in (("bomb", []), ("bomb-memory", NO_UNZIPPED_LIMIT)):
                if case not in skip:
                    figures = peak_memory(work / "bomb", work / f"out-{case}", options)
                    result[case] = {"input_mb": round(size / 1e6, 1), "unzipped_gb": args.bomb_gb, **figures}
    baseline = result["baseline"]
    print(f"{result['command']}; load average {result['load_average']:.1f} at the start")
    print(
        f"baseline (one small file): peak {baseline['peak_bytes'] / 2**30:.2f} GiB resident, "
        f"{baseline['peak_pss_bytes'] / 2**30:.2f} GiB proportional, {baseline['seconds']} s"
    )
    for case in CASES:
        if case in result:
            figures = result[case]
            figures["above_baseline_bytes"] = figures["peak_bytes"] - baseline["peak_bytes"]
            figures["above_baseline_pss_bytes"] = figures["peak_pss_bytes"] - baseline["peak_pss_bytes"]
            files = f"{figures['files']:,} files, " if "files" in figures else ""
            print(
                f"{case}: {files}{figures['input_mb']} MB in, {figures['documents']:,} documents, "
                f"{figures['report_rows']:,} report rows, "
                f"{figures['seconds']} s; peak {figures['peak_bytes'] / 2**30:.2f} GiB resident "
                f"({figures['above_baseline_bytes'] / 2**30:.2f} above the baseline), "
                f"{figures['peak_pss_bytes'] / 2**30:.2f} GiB proportional "
                f"({figures['above_baseline_pss_bytes'] / 2**30:.2f} above the baseline)"
            )
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
