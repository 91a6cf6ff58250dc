"""
The ingestion benchmark (prints only): one generated folder of small files of every format (`jobs.bench.files`,
text from `data/text/`) converted (a) by our converters (`qa_core.ingest`, in-process, one process), (b) by
Haystack's converters of each format (`TextFileToDocument`, `MarkdownToDocument`, `HTMLToDocument`,
`PyPDFToDocument`, `DOCXToDocument`, `JSONConverter` on each JSONL line, `CSVToDocument` by row), each run over the
files of its format, and (c) by `python -m jobs.ingest` on a local Ray of its own (all the machine's cores; end to
end, Ray's start and its workers' imports included). Files/s and MB/s per format and overall, ours / Haystack,
and how many of each side's documents have a text equal to Haystack's for the same file. Then (d, `update`) 1% of
the files changed, 1% added and 1% deleted, and `python -m jobs.ingest` run again over (c)'s output: the files it
converted, counted, and its time against (c)'s.

    .venv/bin/python -m jobs.bench.ingest [--files 7000] [--output ingest.json] [--skip haystack,ray,update]
        [--keep DIR]

Both in-process sides first convert one file of each format untimed, so that the libraries' imports are not timed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from jobs.bench.files import write_mixed_folder
from qa_core.ingest import convert_files
from qa_core.ingest.convert import file_format
from qa_core.ingest.sources import list_files

REPOSITORY = Path(__file__).resolve().parents[2]  # where `python -m jobs.ingest` runs
SIDES = ("ours", "haystack", "ray", "update")
CHANGED_SHARE = 0.01  # of the folder's files, for the update: as many changed, added and deleted
FORMAT_ORDER = ("txt", "markdown", "html", "pdf", "docx", "jsonl", "csv")


@dataclass
class Side:
    """
    One side's conversion of the folder.

    :param seconds: Format -> seconds (wall clock) to convert its files; `"all"` alone for the Ray job.
    :param texts: Relative file path -> its documents' texts, in order.
    :param manifest: The Ray job's manifest.json.
    """

    name: str
    seconds: dict[str, float] = field(default_factory=dict)
    texts: dict[str, list[str]] = field(default_factory=dict)
    manifest: dict | None = None


def by_format(root: Path) -> dict[str, list[str]]:
    """The folder's files, by format, in `FORMAT_ORDER`."""
    groups = defaultdict(list)
    for path in list_files(root):
        groups[file_format(path)].append(path)
    return {fmt: groups[fmt] for fmt in FORMAT_ORDER if groups[fmt]}


def ours(root: Path, groups: dict[str, list[str]]) -> Side:
    """`qa_core.ingest.convert_files` over each format's files, in this process."""
    side = Side("ours")
    for fmt, paths in groups.items():
        convert_files(str(root), paths[:1])  # untimed: the format's libraries imported
        start = time.perf_counter()
        result = convert_files(str(root), paths)
        side.seconds[fmt] = time.perf_counter() - start
        for doc in result.documents:
            side.texts.setdefault(doc.meta["file_path"], []).append(doc.content)
    return side


def _haystack_run(root: Path, fmt: str, paths: list[str]) -> list:
    from haystack.components.converters import (
        CSVToDocument,
        DOCXToDocument,
        HTMLToDocument,
        JSONConverter,
        MarkdownToDocument,
        PyPDFToDocument,
        TextFileToDocument,
    )
    from haystack.dataclasses import ByteStream

    sources = [str(root / path) for path in paths]
    if fmt == "jsonl":  # JSONConverter reads one JSON value per source: one source per line, as the tests do
        lines = []
        for path in paths:
            for line in (root / path).read_bytes().split(b"\n"):
                if line.strip():
                    lines.append(ByteStream(line, meta={"file_path": str(root / path)}))
        converter = JSONConverter(content_key="content", extra_meta_fields="*", store_full_path=True)
        return converter.run(lines)["documents"]
    if fmt == "csv":
        return CSVToDocument(conversion_mode="row", store_full_path=True).run(sources, content_column="content")[
            "documents"
        ]
    converter = {
        "txt": lambda: TextFileToDocument(store_full_path=True),
        "markdown": lambda: MarkdownToDocument(progress_bar=False, store_full_path=True),
        "html": lambda: HTMLToDocument(store_full_path=True),
        "pdf": lambda: PyPDFToDocument(store_full_path=True),
        "docx": lambda: DOCXToDocument(store_full_path=True),
    }[fmt]()
    return converter.run(sources)["documents"]


def haystack(root: Path, groups: dict[str, list[str]]) -> Side:
    """Haystack's converter of each format over its files, in this process."""
    side = Side("haystack")
    for fmt, paths in groups.items():
        _haystack_run(root, fmt, paths[:1])  # untimed: the format's libraries imported
        start = time.perf_counter()
        documents = _haystack_run(root, fmt, paths)
        side.seconds[fmt] = time.perf_counter() - start
        for doc in documents:
            side.texts.setdefault(Path(doc.meta["file_path"]).relative_to(root).as_posix(), []).append(doc.content)
    return side


def ray_job(root: Path, output: Path) -> Side:
    """`python -m jobs.ingest` on a local Ray of its own (no `RAY_ADDRESS`), timed end to end; its texts read back."""
    import pyarrow.dataset as pads

    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "jobs.ingest", "--input", str(root), "--output", str(output)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPOSITORY, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"jobs.ingest exited {done.returncode}: {done.stderr[-2000:]}")
    side = Side("ray", {"all": seconds}, manifest=json.loads((output / "manifest.json").read_text()))
    table = pads.dataset(str(output / "documents"), format="parquet").to_table(columns=["file_path", "line", "content"])
    for row in sorted(table.to_pylist(), key=lambda row: (row["file_path"], row["line"] or 0)):
        side.texts.setdefault(row["file_path"], []).append(row["content"])
    return side


def change_folder(root: Path, share: float) -> dict[str, int]:
    """
    `share` of the folder's files (every 1/share-th, at least one) changed (given another file's bytes of the same
    format), as many added (copies under new names) and as many deleted; returns how many of each.
    """
    paths = list_files(root)
    step = max(1, round(1 / share))
    picked = paths[::step]
    changed, added, deleted = picked[0::3], picked[1::3], picked[2::3]
    for path in changed:
        other = next(p for p in paths if p != path and file_format(p) == file_format(path))
        (root / path).write_bytes((root / other).read_bytes())
    for path in added:
        target = root / path
        (target.parent / f"added-{target.name}").write_bytes(target.read_bytes())
    for path in deleted:
        (root / path).unlink()
    return {"changed": len(changed), "new": len(added), "deleted": len(deleted)}


def update(root: Path, output: Path, first: Side) -> dict:
    """(d): the folder changed (`change_folder`), then `python -m jobs.ingest` again over `first`'s output."""
    made = change_folder(root, CHANGED_SHARE)
    side = ray_job(root, output)
    manifest = side.manifest
    return {
        "made": made,
        "counted": {change: manifest[f"files_{change}"] for change in ("new", "changed", "unchanged", "deleted")},
        "seconds": side.seconds["all"],
        "vs_first": side.seconds["all"] / first.seconds["all"],
        "convert_s": manifest["timings"]["convert_s"],
        "first_convert_s": first.manifest["timings"]["convert_s"],
    }


def equal_texts(side: Side, reference: Side, paths: list[str]) -> int:
    """How many of `side`'s documents of these files have a text that Haystack gives for the same file."""
    return sum(
        sum((Counter(side.texts.get(path, [])) & Counter(reference.texts.get(path, []))).values()) for path in paths
    )


def table(groups: dict[str, list[str]], sizes: dict[str, int], sides: list[Side]) -> list[dict]:
    """One row per side and format, and per side overall: files, MB, documents, seconds, rates, ratios, agreement."""
    reference = next((side for side in sides if side.name == "haystack"), None)
    everything = [path for paths in groups.values() for path in paths]
    rows = []
    for side in sides:
        parts = [(fmt, paths) for fmt, paths in groups.items() if fmt in side.seconds]
        parts.append(("all", everything))
        for fmt, paths in parts:
            seconds = side.seconds[fmt] if fmt in side.seconds else sum(side.seconds.values())
            megabytes = sum(sizes[path] for path in paths) / 1e6
            row = {
                "side": side.name,
                "format": fmt,
                "files": len(paths),
                "mb": megabytes,
                "documents": sum(len(side.texts.get(path, [])) for path in paths),
                "seconds": seconds,
                "files_per_s": len(paths) / seconds,
                "mb_per_s": megabytes / seconds,
                "haystack_documents": None,
                "equal_texts": None,
                "vs_haystack": None,
            }
            if reference is not None:
                row["haystack_documents"] = sum(len(reference.texts.get(path, [])) for path in paths)
                row["equal_texts"] = equal_texts(side, reference, paths)
                if fmt in reference.seconds or fmt == "all":
                    theirs = reference.seconds[fmt] if fmt in reference.seconds else sum(reference.seconds.values())
                    row["vs_haystack"] = theirs / seconds
            rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| side | format | files | MB | documents | seconds | files/s | MB/s | x Haystack | equal texts / Haystack's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = "" if row["vs_haystack"] is None else f"{row['vs_haystack']:.2f}"
        agree = "" if row["equal_texts"] is None else f"{row['equal_texts']:,} / {row['haystack_documents']:,}"
        lines.append(
            f"| {row['side']} | {row['format']} | {row['files']:,} | {row['mb']:.2f} | {row['documents']:,} | "
            f"{row['seconds']:.3f} | {row['files_per_s']:,.0f} | {row['mb_per_s']:.2f} | {ratio} | {agree} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Generates the folder, measures every side, prints the table; returns (and with `--output` writes) it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=7000, help="files in the folder, the formats in turn")
    parser.add_argument("--output", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--skip", default="", help=f"comma-separated sides to leave out of {SIDES[1:]}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="write the folder here and keep it (a new folder)")
    args = parser.parse_args(argv)
    skip = {name for name in args.skip.split(",") if name}
    if skip - set(SIDES[1:]):
        parser.error(f"--skip: unknown sides {sorted(skip - set(SIDES[1:]))} (known: {', '.join(SIDES[1:])})")
    if args.keep and args.keep.exists() and any(args.keep.iterdir()):
        parser.error(f"--keep {args.keep}: the folder exists and is not empty")
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as folder:
        root = args.keep.resolve() if args.keep else Path(folder) / "files"
        sizes = write_mixed_folder(root, args.files, args.seed)
        groups = by_format(root)
        load = [os.getloadavg()[0]]  # the machine's load average (1 min) before and after the sides ran
        sides = [ours(root, groups)]
        if "haystack" not in skip:
            sides.append(haystack(root, groups))
        updated = None
        if "ray" not in skip:
            sides.append(ray_job(root, Path(folder) / "out"))
            if "update" not in skip:
                updated = update(root, Path(folder) / "out", sides[-1])
        load.append(os.getloadavg()[0])
    rows = table(groups, sizes, sides)
    result = {"command": " ".join(["python -m jobs.bench.ingest", *(argv if argv is not None else sys.argv[1:])])}
    result.update(files=args.files, cpus=os.cpu_count(), load_average=load, rows=rows)
    print(
        f"{args.files:,} files, {sum(sizes.values()) / 1e6:.2f} MB, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.1f} before and {load[1]:.1f} after; {result['command']}"
    )
    print(format_table(rows))
    for side in sides:
        if side.manifest:
            manifest = side.manifest
            result["ray_job"] = {key: manifest[key] for key in ("files_converted", "documents", "report_rows")}
            result["ray_job"].update(manifest["timings"])
            print(
                f"ray: Ray's start {manifest['timings'].get('ray_start_s', 0):.1f} s and the conversion "
                f"{manifest['timings']['convert_s']:.1f} s of {side.seconds['all']:.1f} s end to end; "
                f"{manifest['report_rows']} report rows"
            )
    if updated is not None:
        result["update"] = updated
        made, counted = updated["made"], updated["counted"]
        print(
            f"update: {made['changed']} files changed, {made['new']} added, {made['deleted']} deleted; jobs.ingest "
            f"again counted {counted['changed']} changed, {counted['new']} new, {counted['deleted']} deleted, "
            f"{counted['unchanged']} unchanged, in {updated['seconds']:.1f} s end to end "
            f"({updated['vs_first']:.2f} x the first run's; conversion {updated['convert_s']:.1f} s against "
            f"{updated['first_convert_s']:.1f} s)"
        )
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
