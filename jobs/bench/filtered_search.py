"""
The filtered BM25 search benchmark (prints only): BM25 search over a sharded index of synthetic passages without a
filter and with metadata filters matching about 1% and 50% of the passages, side by side on the same queries, as
queries/s and ratios to the unfiltered search; and the time to turn each filter into its allowed-mask over the
metadata column (`qa_core.retrieval.filters.matching_mask`).

    .venv/bin/python -m jobs.bench.filtered_search --passages 1000000 --queries 400

Each passage gets a metadata field `bucket`, an integer drawn uniformly from 0 to 99, so that `bucket < 1` matches
about 1% of the passages and `bucket < 50` about half. The index is built in this process (`sharding.build_shards`,
`--shard-size` passages a shard) and searched with `sharding.search_shards`, as the bulk job searches an index's
shards; each filtered search's hits are checked to be allowed, and as many as the unfiltered search's where at least
k passages match and score.

With `--index DIR` the index is the one `python -m jobs.index` builds with its defaults and `--filter-fields bucket`
(built first, from a table of the synthetic passages written beside it, where DIR holds none): its shards are
loaded memory-mapped and each filter's mask is made from the `bucket` values the index keeps per shard, as the bulk
job makes it, with no documents table read (the way to measure corpora too large to build in one process).

    .venv/bin/python -m jobs.bench.filtered_search --passages 10000000 --queries 400 --index /tmp/filtered-10m
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.bench.retrieval import synthetic_texts
from jobs.indexing.record import BUILD_FILE, shard_locations
from qa_core.retrieval import BM25Index
from qa_core.retrieval.filter_fields import read_filter_fields
from qa_core.retrieval.filters import matching_mask
from qa_core.retrieval.sharding import build_shards, search_shards, shard_bounds
from qa_core.retrieval.topk import NO_POSITION

BUCKET = "meta.bucket"
_WRITE_STEP = 100_000  # passages written to the table at a time

# The filters compared, by name, on the synthetic `bucket` field (uniform over 0..99).
FILTERS = {
    "1%": {"field": BUCKET, "operator": "<", "value": 1},
    "50%": {"field": BUCKET, "operator": "<", "value": 50},
}


def built_here(passages: int, words: int, shard_size: int) -> tuple[list[BM25Index], list[dict], float]:
    """The index built in this process: its shards, each shard's `bucket` column (`meta.bucket`), build seconds."""
    texts = synthetic_texts(passages, words, seed=0)
    ids = [f"p{i}" for i in range(passages)]
    start = time.perf_counter()
    bounds = shard_bounds(passages, max(1, -(-passages // shard_size)))
    shards, _ = build_shards(ids, texts, bounds)
    build_s = time.perf_counter() - start
    buckets = np.random.default_rng(1).integers(0, 100, passages)
    return shards, [{BUCKET: pa.array(buckets[a:b])} for a, b in zip(bounds, bounds[1:], strict=False)], build_s


def built_by_jobs_index(folder: Path, passages: int, words: int) -> tuple[list[BM25Index], list[dict], float | None]:
    """
    The index `python -m jobs.index` built in `folder` with `--filter-fields bucket` (built now, from a table of
    the synthetic passages written beside it, where the folder holds no index): its shards memory-mapped, each
    shard's kept `bucket` values, and the build's seconds (None: built before).
    """
    build_s = None
    if not (folder / BUILD_FILE).exists():
        table = folder.with_name(f"{folder.name}-documents.parquet")
        _write_documents(table, passages, words)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jobs.index", "--documents", str(table), "--output", str(folder),
                        "--filter-fields", "[bucket]"], check=True)  # fmt: skip
        build_s = time.perf_counter() - start
    record = json.loads((folder / BUILD_FILE).read_text())
    locations = shard_locations(str(folder), record["shards"])
    return [BM25Index.load(location) for location in locations], [read_filter_fields(Path(location))
                                                                     for location in locations], build_s  # fmt: skip


def _write_documents(path: Path, passages: int, words: int) -> None:
    """A table of the synthetic passages (`id`, `content`) with a `bucket` drawn uniformly from 0 to 99, in steps."""
    schema = pa.schema([("id", pa.string()), ("content", pa.string()), ("bucket", pa.int64())])
    rng = np.random.default_rng(1)
    with pq.ParquetWriter(path, schema) as writer:
        for first in range(0, passages, _WRITE_STEP):
            count = min(_WRITE_STEP, passages - first)
            writer.write_table(pa.table({"id": [f"p{i}" for i in range(first, first + count)],
                                         "content": synthetic_texts(count, words, seed=first),
                                         "bucket": rng.integers(0, 100, count)}, schema=schema))  # fmt: skip


def measure(
    shards: list[BM25Index], columns: list[dict], build_s: float | None, n_queries: int, k: int, rounds: int,
    batch: int,
) -> dict:  # fmt: skip
    """
    Times each search (unfiltered and `FILTERS`) over the shards batch by batch of queries, each way `rounds` times
    in turn, its best time kept, so that a shared machine's load weighs on each way alike.

    :param columns: Each shard's filter fields (`meta.bucket`), in corpus order.
    :returns: The figures: build seconds, each filter's share matched and mask seconds, each way's queries/s and
        its ratio to the unfiltered search's.
    :raises AssertionError: If a filtered search returns a passage its filter does not match, or fewer hits than
        the passages that match and score allow.
    """
    passages = sum(shard.n_docs for shard in shards)
    masks, mask_s = {"unfiltered": None}, {}
    for name, filters in FILTERS.items():  # one mask over the corpus, made shard by shard
        start = time.perf_counter()
        masks[name] = np.concatenate([matching_mask(filters, fields, shard.n_docs)
                                      for fields, shard in zip(columns, shards, strict=True)])  # fmt: skip
        mask_s[name] = time.perf_counter() - start
    queries = synthetic_texts(n_queries, 8, seed=2)
    load_before = os.getloadavg()
    seconds = dict.fromkeys(masks, 0.0)
    for first in range(0, n_queries, batch):
        some = queries[first : first + batch]
        best = dict.fromkeys(masks, np.inf)
        for _ in range(rounds):
            for name, allowed in masks.items():
                start = time.perf_counter()
                found = search_shards(shards, some, k, allowed=allowed)
                best[name] = min(best[name], time.perf_counter() - start)
                _check(found[0], allowed)
        for name, spent in best.items():
            seconds[name] += spent
    per_second = {name: n_queries / spent for name, spent in seconds.items()}
    return {
        "passages": passages,
        "shards": len(shards),
        "queries": n_queries,
        "k": k,
        "build_s": build_s,
        "matched": {name: float(masks[name].mean()) for name in FILTERS},
        "mask_s": mask_s,
        "queries_per_s": per_second,
        "ratio_to_unfiltered": {name: per_second[name] / per_second["unfiltered"] for name in FILTERS},
        "load": [load_before[0], os.getloadavg()[0]],
    }


def _check(positions: np.ndarray, allowed: np.ndarray | None) -> None:
    hits = positions[positions != NO_POSITION]
    if allowed is not None and not allowed[hits].all():
        raise AssertionError("A filtered search returned a passage its filter does not match.")


def report(measured: dict) -> str:
    """The figures as lines."""
    per_second, ratios = measured["queries_per_s"], measured["ratio_to_unfiltered"]
    lines = [
        f"{measured['passages']:,} passages in {measured['shards']} shards ("
        + ("built before" if measured["build_s"] is None else f"built in {measured['build_s']:.1f} s") + "), "
        f"{measured['queries']} queries, top {measured['k']}; load average {measured['load'][0]:.1f} -> "
        f"{measured['load'][1]:.1f}",
        f"unfiltered: {per_second['unfiltered']:,.0f} queries/s",
    ]
    for name in FILTERS:
        lines.append(
            f"filter {name} (matches {measured['matched'][name]:.2%}, mask {measured['mask_s'][name] * 1000:.0f} ms):"
            f" {per_second[name]:,.0f} queries/s, {ratios[name]:.2f}x the unfiltered search"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000, help="synthetic passages to index")
    parser.add_argument("--words", type=int, default=80, help="words a passage")
    parser.add_argument("--shard-size", type=int, default=250_000, help="passages a shard")
    parser.add_argument("--queries", type=int, default=400, help="synthetic 8-word queries")
    parser.add_argument("--top-k", type=int, default=10, help="hits a query")
    parser.add_argument("--rounds", type=int, default=3, help="times each way searches a batch (best kept)")
    parser.add_argument("--batch", type=int, default=50, help="queries a batch")
    parser.add_argument("--index", type=Path, help="search the index jobs.index builds here (built first if absent)")
    args = parser.parse_args(argv)
    if args.index is None:
        index = built_here(args.passages, args.words, args.shard_size)
    else:
        index = built_by_jobs_index(args.index, args.passages, args.words)
    measured = measure(*index, args.queries, args.top_k, args.rounds, args.batch)
    print(report(measured))
    print(json.dumps(measured))
    return measured


if __name__ == "__main__":
    main()
