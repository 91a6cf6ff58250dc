"""
The index update benchmark (prints only): `python -m jobs.index --update` against a fresh build of the same
documents, time and the machine's peak memory (above its level before), each command in a process of its own
measured from outside (`data.run_measured`):

    python -m jobs.bench.index_update [--passages 1000000] [--words 80] [--spread random|runs]
        [--shard-size 10000] [--dense-passages 20000 --embedding-model MODEL] [--work DIR]

A corpus of `--passages` synthetic passages (`retrieval.synthetic_texts`, whole documents) is indexed; then 1% of its
documents are deleted, 1% changed (new texts) and 1% added after the others, and the index is updated to the new
table, while a fresh build of the new table is the reference. `--spread random` picks the changed and deleted
documents anywhere (every shard is touched, so every shard is written again: the update costs what a build
costs); `runs` picks them in runs of 1,000 consecutive documents (the passages of a few files: most shards are
kept). The indexes have shards of `--shard-size` passages: an update writes again the shards its changes touch. With `--embedding-model` the same is measured for a dense index of `--dense-passages` passages (embedding
dominates there, on CPUs). The update's figures and shards kept are printed, and its time as a share of the build's.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.bench.data import run_measured
from jobs.bench.retrieval import synthetic_texts, write_synthetic_documents
from jobs.indexing.record import BUILD_FILE
from jobs.indexing.versions import current_version

CHANGED_SHARE = 0.01  # of the documents: deleted, changed, and added (each)
RUN_LENGTH = 1000  # documents per run of changes with `--spread runs`


def changed_table(before: Path, after: Path, words: int, spread: str, seed: int = 0) -> dict[str, int]:
    """
    Writes `after`: the documents of `before` less `CHANGED_SHARE` deleted, `CHANGED_SHARE` with new texts, and
    `CHANGED_SHARE` added after them; returns the counts.
    """
    table = pq.read_table(before)
    n = table.num_rows
    count = max(1, int(n * CHANGED_SHARE))
    rng = np.random.default_rng(seed)
    if spread == "random":
        picked = rng.choice(n, 2 * count, replace=False)
    else:  # runs of consecutive documents, at random run starts
        runs = rng.choice(n // RUN_LENGTH, -(-2 * count // RUN_LENGTH), replace=False)
        picked = np.concatenate([np.arange(run * RUN_LENGTH, (run + 1) * RUN_LENGTH) for run in runs])[: 2 * count]
        rng.shuffle(picked)
    deleted, changed = np.sort(picked[:count]), np.sort(picked[count:])
    contents = table["content"].to_pylist()
    for row, text in zip(changed.tolist(), synthetic_texts(count, words, seed=seed + 1), strict=True):
        contents[row] = text
    kept = np.setdiff1d(np.arange(n), deleted)
    ids = table["id"].take(pa.array(kept)).to_pylist() + [f"added{i}" for i in range(count)]
    texts = [contents[row] for row in kept.tolist()] + synthetic_texts(count, words, seed=seed + 2)
    pq.write_table(pa.table({"id": ids, "content": texts}), after, row_group_size=250_000)
    return {"deleted": count, "changed": count, "added": count}


def measure(label: str, work: Path, before: Path, after: Path, flags: list[str]) -> None:
    """Builds `before`, updates it to `after`, and builds `after` afresh, each measured; prints the comparison."""
    index, fresh = work / f"index-{label}", work / f"fresh-{label}"
    command = [sys.executable, "-m", "jobs.index"]
    run_measured([*command, "--documents", str(before), "--output", str(index), *flags])
    built = run_measured([*command, "--documents", str(after), "--output", str(fresh), *flags])
    updated = run_measured([*command, "--update", str(after), "--index", str(index)])
    record = json.loads((Path(current_version(str(index))) / BUILD_FILE).read_text())
    update = record["update"]
    print(
        f"{label}: fresh build {built.wall_s:.1f} s, machine peak {built.peak_mib:,.0f} MiB; update {updated.wall_s:.1f} s "
        f"({updated.wall_s / built.wall_s:.1%} of the build), machine peak {updated.peak_mib:,.0f} MiB; "
        f"{record['documents']:,} passages, {update['added']:,} added, {update['changed']:,} changed, "
        f"{update['deleted']:,} deleted; {update['shards_kept']} shards kept, {update['shards_written']} written "
        f"({update['passages_counted']:,} passages counted, {update['passages_tokenized']:,} of them tokenized, "
        f"{update['vectors_embedded']:,} vectors embedded)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m jobs.bench.index_update", description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000, help="passages of the BM25 corpus")
    parser.add_argument("--words", type=int, default=80, help="words per passage")
    parser.add_argument("--spread", choices=["random", "runs"], default="random", help="where the changes fall")
    parser.add_argument("--shard-size", type=int, default=10_000, help="passages per shard of the indexes")
    parser.add_argument("--embedding-model", help="also measure a dense index with this sentence-transformers model")
    parser.add_argument("--dense-passages", type=int, default=20_000, help="passages of the dense corpus")
    parser.add_argument("--work", help="folder for the tables and indexes (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(args.work or temporary)
        work.mkdir(parents=True, exist_ok=True)
        shards = ["--index-shard-size", str(args.shard_size)]
        sizes = [("bm25", args.passages, shards)]
        if args.embedding_model:
            sizes.append(("dense", args.dense_passages, [*shards, "--retrieval", "dense", "--embedding-model",
                                                         args.embedding_model]))  # fmt: skip
        for label, passages, flags in sizes:
            before, after = work / f"{label}-before.parquet", work / f"{label}-after.parquet"
            write_synthetic_documents(before, passages, args.words)
            changed_table(before, after, args.words, args.spread)
            measure(label, work, before, after, flags)


if __name__ == "__main__":
    main()
