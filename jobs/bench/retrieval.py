"""
The retrieval benchmark (prints only): `qa_core.retrieval.BM25Index`'s build time, peak memory and queries/s on
synthetic passages made from the repository's local text, and Haystack's `InMemoryDocumentStore.bm25_retrieval`
side by side on the same queries at a size it can handle (20k passages by default), as a ratio.

    .venv/bin/python -m jobs.bench.retrieval --passages 100000 --haystack-passages 20000

With `--build`, the index build at scale instead, from a Parquet table of the synthetic passages, as the job and
`python -m jobs.index` build it: `ray` (by Ray Data, `build_index_with_ray`), `single` (in one process,
`build_index`, as every build was before) or `both`, side by side, each in a process of its own: build time,
peak memory of the driver and of the whole machine (above its level before the build), and queries/s over the
shards (searched one after the other in one process, merged exactly): scoring every document as before, and
pruned (`qa_core.retrieval.pruning`), side by side, the same hits and scores checked bit for bit.

With `--search INDEX`, only that side by side search over the shards of an index folder already built (`--work`
keeps the documents; `python -m jobs.index` builds an index folder):

    .venv/bin/python -m jobs.bench.retrieval --search /data/index --queries 1000

`quality` as the first argument compares BM25, dense and hybrid retrieval's recall, MRR and end-to-end EM / F1
instead (`jobs.bench.retrieval_quality`, its own options):

    .venv/bin/python -m jobs.bench.retrieval quality --model models/minilm-squad

`dense` as the first argument measures exact dense search in fp32 and bf16 and the HNSW index instead
(`jobs.bench.dense_search`, its own options):

    .venv/bin/python -m jobs.bench.retrieval dense --vectors 1000000

    .venv/bin/python -m jobs.bench.retrieval --build both --passages 1000000 --shard-size 250000

Without `--shard-size` the builds choose their shards as `python -m jobs.index` does by default (from the memory
budget, `jobs.indexing.memory`). With `--job-questions N [N ...]`, the bulk job then answers N synthetic questions
over the Ray build's index with its default settings (`--model`'s reader), each run measured from outside as the
build is: its time and the machine's peak; and the index's bytes a passage are printed (its files, then its passage
stores apart):

    .venv/bin/python -m jobs.bench.retrieval --build ray --passages 1000000 --words 80 --job-questions 200 2000

With `--split-length WORDS` (and `--split-overlap`), the synthetic texts are documents that the builds split into
passages, and the job runs with the same splitting; the stores counted apart are then where the passages lie and
their source documents:

    .venv/bin/python -m jobs.bench.retrieval --build ray --passages 250000 --words 400 --split-length 100 \
        --split-overlap 20 --job-questions 200 2000
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.bench.data import run_measured
from jobs.passages import PASSAGES_FILE, SOURCE_IDS_FILE, SOURCES_FILE
from qa_core.local_models import TEXT_FILE
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.sharding import search_shards
from qa_core.retrieval.store import STORE_FILE
from qa_core.retrieval.topk import NO_POSITION, merge_top_k

BUILDS = ("ray", "single")  # `--build`'s kinds, in the order `both` runs them
# The Ray build's workers at the single-process build's niceness (Ray's default is 15): on a machine shared with
# other processes both builds then compete for the cores alike (at 15 the other processes come first).
_RAY_WORKER_NICENESS = {"RAY_worker_niceness": "0"}
_PASSAGES_PER_WRITE = 250_000  # synthetic passages made and written to Parquet at a time (one row group each)
# The files of a shard that keep its passages' texts (counted apart from the index): its passage store, or split
# where its passages lie and its source documents.
_STORES = (STORE_FILE, PASSAGES_FILE, SOURCE_IDS_FILE, SOURCES_FILE)


@cache
def _words() -> list[str]:
    with TEXT_FILE.open(encoding="utf-8") as file:
        return " ".join(json.loads(line)["text"] for line in file).split()


def synthetic_texts(n: int, words_per_text: int, seed: int) -> list[str]:
    """`n` texts, each `words_per_text` consecutive words of the local text from a random start."""
    words = _words()
    starts = np.random.default_rng(seed).integers(0, len(words) - words_per_text, n)
    return [" ".join(words[start : start + words_per_text]) for start in starts]


def write_synthetic_documents(path: Path, n: int, words_per_text: int, first_id: int = 0) -> None:
    """A documents table (`id` p0, p1, ... from `first_id`, `content`) of `n` synthetic passages, written in steps."""
    schema = pa.schema([("id", pa.string()), ("content", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for first in range(first_id, first_id + n, _PASSAGES_PER_WRITE):
            count = min(_PASSAGES_PER_WRITE, first_id + n - first)
            ids = [f"p{i}" for i in range(first, first + count)]
            texts = synthetic_texts(count, words_per_text, seed=first)
            writer.write_table(pa.table({"id": ids, "content": texts}, schema=schema))


def measure_build(
    kind: str,
    documents: str,
    index: str,
    shard_size: int | None,
    queries: list[str],
    k: int,
    added: str | None,
    split: tuple[int | None, int] = (None, 0),
) -> dict:
    """
    Builds the index of `documents` (with `split`, its `split_length` and `split_overlap`, of their passages) into
    `index` in this process (`single`) or by a Ray started here (`ray`), then (`ray` with `added`) adds the
    documents of `added` to it, then searches its shards.

    Ray's start is not counted, nor Ray Data's (its first execution in a process starts its executor and
    statistics actor, 2-3 s on this machine, once per process: `ray_data_start_s`, reported apart).

    :returns: build seconds, the addition's seconds (or None), the shards and their size, the index's bytes (its
        passage stores apart: split, where the passages lie and their source documents), the driver's peak RSS in
        MiB, Ray Data's start in seconds (None for `single`) and queries/s over the shards.
    """
    from jobs.indexing.build import build_index, build_index_with_ray, write_index
    from jobs.indexing.grow import add_documents_with_ray
    from jobs.indexing.record import shard_locations
    from jobs.ray_start import configure_ray_data, start_ray
    from jobs.retrieval_settings import RetrievalSettings
    from jobs.run_settings import RunSettings

    settings = RetrievalSettings(index_shard_size=shard_size, split_length=split[0], split_overlap=split[1])
    ray_data_start_s = None
    if kind == "ray":
        import ray.data

        start_ray(RunSettings(output=index, quiet=True))
        configure_ray_data(RunSettings(output=index))
        start = time.perf_counter()
        ray.data.range(1).map_batches(lambda batch: batch).take_all()
        ray_data_start_s = time.perf_counter() - start
    start = time.perf_counter()
    if kind == "ray":
        record = build_index_with_ray(settings, documents, index)
    else:
        built = build_index(settings, documents)
        write_index(built, index)
        record = built.record
        del built
    build_s = time.perf_counter() - start
    driver_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    files = [path for path in Path(index).rglob("*") if path.is_file()]
    store_bytes = sum(path.stat().st_size for path in files if path.name in _STORES)
    index_bytes = sum(path.stat().st_size for path in files) - store_bytes
    add_s = None
    if kind == "ray" and added is not None:
        start = time.perf_counter()
        record = add_documents_with_ray(index, added)
        add_s = time.perf_counter() - start
    shards = [BM25Index.load(location) for location in shard_locations(index, record["shards"])]
    return {
        "build_s": build_s,
        "add_s": add_s,
        "shards": record["shards"],
        "shard_size": record["shard_size"],
        "documents": record["documents"],
        "index_bytes": index_bytes,
        "store_bytes": store_bytes,
        "driver_mib": driver_mib,
        "ray_data_start_s": ray_data_start_s,
        **compare_search(shards, queries, k),
    }


# `compare_search`'s ways of searching the shards, in the order it times them.
SEARCHES = {
    "every document": lambda shards, queries, k: merge_top_k(
        [shard.search(queries, k, prune=False) for shard in shards], k
    ),
    "pruned": lambda shards, queries, k: merge_top_k([shard.search(queries, k) for shard in shards], k),
    "pruned, floors": lambda shards, queries, k: search_shards(shards, queries, k),
}


def compare_search(shards: list[BM25Index], queries: list[str], k: int, rounds: int = 3, batch: int = 50) -> dict:
    """
    Searches the shards one after the other in this process, merged exactly, each way of `SEARCHES` (scoring
    every document as before; pruned; pruned with the k-th best of the earlier shards as floors), side by side:
    batch by batch of queries, each way `rounds` times in turn, its best time kept, so that a shared machine's
    load weighs on each way alike; and checks that they find the same positions and scores bit for bit.

    :returns: Each way's queries/s (`queries_per_s` for the last, the search as it runs), and the load averages
        before and after.
    :raises AssertionError: If two ways find different hits or scores.
    """
    load_before = os.getloadavg()
    seconds = dict.fromkeys(SEARCHES, 0.0)
    for first in range(0, len(queries), batch):
        some = queries[first : first + batch]
        best, reference = dict.fromkeys(SEARCHES, np.inf), None
        for _ in range(rounds):
            for name, search in SEARCHES.items():
                start = time.perf_counter()
                found = search(shards, some, k)
                best[name] = min(best[name], time.perf_counter() - start)
                if reference is None:
                    reference = found
                if not all(left.tobytes() == right.tobytes() for left, right in zip(found, reference, strict=True)):
                    raise AssertionError(f"The {name} search found other hits or scores than scoring every document.")
        for name, spent in best.items():
            seconds[name] += spent
    per_second = {name: len(queries) / spent for name, spent in seconds.items()}
    return {
        "queries_per_s": per_second[list(SEARCHES)[-1]],
        "search_queries_per_s": per_second,
        "load": [load_before[0], os.getloadavg()[0]],
    }


def search_report(measured: dict) -> str:
    """`compare_search`'s figures as one line."""
    per_second = measured["search_queries_per_s"]
    ways = ", ".join(f"{name} {value:,.0f}" for name, value in per_second.items())
    first = next(iter(per_second.values()))
    load = measured["load"]
    return (
        f"queries/s over the shards: {ways} ({measured['queries_per_s'] / first:.2f}x; "
        f"load average {load[0]:.1f} -> {load[1]:.1f})"
    )


def search_index(index: str, n_queries: int, k: int, ray_queries: int = 0, stages_per_cpu: list[float] = ()) -> None:
    """
    `--search`: the side by side search over an index folder's shards (`build.json` says how many); with
    `ray_queries`, then that many queries retrieved by the job's stages (`search_with_ray`), for each number of
    stages per CPU in `stages_per_cpu`: more than the one-process comparison needs, so that the pipeline of stages
    runs full for most of its time.
    """
    from jobs.indexing.record import BUILD_FILE, shard_locations

    record = json.loads((Path(index) / BUILD_FILE).read_text(encoding="utf-8"))
    shards = [BM25Index.load(location) for location in shard_locations(index, record["shards"])]
    passages = sum(shard.n_docs for shard in shards)
    print(f"{passages:,} passages in {len(shards)} shards, {n_queries:,} queries, top {k}", flush=True)
    if n_queries:
        print(search_report(compare_search(shards, synthetic_texts(n_queries, 8, seed=1), k)), flush=True)
    for per_cpu in stages_per_cpu if ray_queries else ():
        print(search_with_ray(index, shards, synthetic_texts(ray_queries, 8, seed=2), k, per_cpu), flush=True)


def search_with_ray(index: str, shards: list[BM25Index], queries: list[str], k: int, stages_per_cpu: float) -> str:
    """
    `--search INDEX --ray-queries N`: the queries retrieved as the job retrieves them (`bm25_shard_stages`: stages
    of consecutive shards, an actor each, chained on Ray Data, every core of a Ray started here), twice: the first
    half of the queries, then all of them, each timed from the dataset's start (the actors' start-up included) to
    its last row. The difference of the two runs cancels the start-up and the filling and draining of the
    pipeline: the steady rate of a long run (noisy where the start-up varies as much as a run's search takes);
    also the second run's rate from its first row out (every actor up), an upper bound of it. The hits of the
    second are checked against `search_shards`'s.
    """
    import ray

    from jobs.engines import RayEngine
    from jobs.indexing.record import shard_locations
    from jobs.ray_start import configure_ray_data, start_ray
    from jobs.retrieval.stages import bm25_shard_stages, shard_stages
    from jobs.run_settings import RunSettings

    cluster = start_ray(RunSettings(output=index, quiet=True))
    configure_ray_data(RunSettings(output=index))
    locations = shard_locations(index, len(shards))
    cpus = float(cluster["cpus"])
    seconds = []
    for some in (queries[: len(queries) // 2], queries):
        start = time.perf_counter()
        questions = ray.data.from_items([{"id": str(row), "query": query} for row, query in enumerate(some)])
        rows, first = [], 0.0  # first: when the first row came out (every actor up)
        for row in bm25_shard_stages(questions, locations, k, cpus, RayEngine(), stages_per_cpu).iter_rows():
            rows.append(row)
            first = first or time.perf_counter()
        seconds.append(time.perf_counter() - start)
    after_first = (len(rows) - 1) / (start + seconds[1] - first)
    rows.sort(key=lambda row: int(row["id"]))
    positions, scores = search_shards(shards, queries, k)
    for row, (row_positions, row_scores) in enumerate(zip(positions, scores, strict=True)):
        kept = row_positions != NO_POSITION
        found = np.asarray(rows[row]["retrieved_positions"]), np.asarray(rows[row]["retrieval_scores"])
        if not (np.array_equal(found[0], row_positions[kept]) and np.array_equal(found[1], row_scores[kept])):
            raise AssertionError(f"Query {row}: the job's retrieval stages found other hits than search_shards.")
    steady = (len(queries) - len(queries) // 2) / (seconds[1] - seconds[0])
    n_stages = len(shard_stages(locations, cpus, stages_per_cpu))
    return (
        f"queries/s over the shards, the job's retrieval stages on Ray ({cpus:g} CPUs, {n_stages} stages): "
        f"{len(queries) // 2:,} queries in {seconds[0]:.1f} s, {len(queries):,} in {seconds[1]:.1f} s "
        f"(the actors' start-up included): steady {steady:,.0f} (the difference of the two runs), "
        f"{after_first:,.0f} after the first row out (an upper bound)"
    )


def compare_builds(args: argparse.Namespace) -> None:
    """`--build`: the documents written once, then each build in a process of its own, measured from outside."""
    kinds = BUILDS if args.build == "both" else (args.build,)
    with tempfile.TemporaryDirectory() as temporary:
        work = args.work or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        documents = work / "documents.parquet"
        write_synthetic_documents(documents, args.passages, args.words)
        sizes = "shards sized by the memory budget" if args.shard_size is None else f"shards of {args.shard_size:,}"
        split = "" if args.split_length is None else f", split by {args.split_length} (overlap {args.split_overlap})"
        texts = "passages" if args.split_length is None else "documents"
        print(f"{args.passages:,} {texts} of {args.words} words{split}, {sizes}", flush=True)
        added = []
        if args.add_share:
            n_added = round(args.passages * args.add_share)
            write_synthetic_documents(work / "added.parquet", n_added, args.words, first_id=args.passages)
            added = ["--added", str(work / "added.parquet")]
        for kind in kinds:
            result = work / f"{kind}.json"
            command = [
                sys.executable, "-m", "jobs.bench.retrieval", "--measure", kind, "--documents", str(documents),
                "--index", str(work / f"index-{kind}"), "--queries", str(args.queries), "--top-k", str(args.top_k),
                "--result", str(result), *(added if kind == "ray" else []),
                *(["--shard-size", str(args.shard_size)] if args.shard_size else []), *_split_flags(args),
            ]  # fmt: skip
            machine = run_measured(command, env={**os.environ, **_RAY_WORKER_NICENESS} if kind == "ray" else None)
            measured = json.loads(result.read_text())
            started = measured["ray_data_start_s"]
            per_passage = {name: measured[f"{name}_bytes"] / measured["documents"] for name in ("index", "store")}
            print(
                f"{kind}: build {measured['build_s']:.1f} s ({measured['shards']} shards"
                f"{'' if started is None else f'; Ray Data started before it in {started:.1f} s'}), driver peak RSS "
                f"{measured['driver_mib']:,.0f} MiB, machine peak {machine.peak_mib:,.0f} MiB above idle, "
                f"command {machine.wall_s:.1f} s; {search_report(measured)}; shards of up to "
                f"{measured['shard_size']:,} passages, index {per_passage['index']:,.0f} bytes a passage (passage "
                f"stores {per_passage['store']:,.0f})",
                flush=True,
            )
            if measured["add_s"] is not None:
                share = f"{args.add_share:.0%} more passages"
                print(f"ray: {share} added in {measured['add_s']:.1f} s, {measured['add_s'] / measured['build_s']:.1%} "
                      "of the build (then the search above)", flush=True)  # fmt: skip
            for n_questions in args.job_questions if kind == "ray" else ():
                print(measure_job(work, str(documents), str(work / "index-ray"), n_questions, args.model,
                                  _split_flags(args)), flush=True)  # fmt: skip
            if not args.work:  # a folder of the user's keeps its indexes (for `--search`)
                subprocess.run(["rm", "-rf", str(work / f"index-{kind}")], check=True)


def _split_flags(args: argparse.Namespace) -> list[str]:
    """The `--split-length` and `--split-overlap` flags of the build and job commands, where a split is asked for."""
    if args.split_length is None:
        return []
    return ["--split-length", str(args.split_length), "--split-overlap", str(args.split_overlap)]


def measure_job(work: Path, documents: str, index: str, n_questions: int, model: str, split: list[str]) -> str:
    """
    The bulk job (`python -m jobs.bulk_qa`, its default settings and the index's `split` flags) answering
    `n_questions` synthetic questions (8 words, no `document_ids`: every one retrieved for) over the index, in a
    process of its own measured from outside.

    :returns: Its line: the questions, seconds, the machine's peak above idle and the engine the job chose.
    """
    questions, output = work / f"questions-{n_questions}.parquet", work / f"job-{n_questions}"
    ids = [f"q{row}" for row in range(n_questions)]
    pq.write_table(pa.table({"id": ids, "query": synthetic_texts(n_questions, 8, seed=3)}), questions)
    command = [sys.executable, "-m", "jobs.bulk_qa", "--questions", str(questions), "--documents", documents,
               "--index", index, "--output", str(output), "--model", model, "--overwrite", "--quiet",
               *split]  # fmt: skip
    machine = run_measured(command, env={**os.environ, **_RAY_WORKER_NICENESS})
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    subprocess.run(["rm", "-rf", str(output)], check=True)
    return (
        f"job over the ray index, {n_questions:,} questions: {machine.wall_s:.1f} s, machine peak "
        f"{machine.peak_mib:,.0f} MiB above idle ({manifest['cluster']['engine']} engine)"
    )


def index_bytes_on_disk(index: BM25Index) -> int:
    """The size of the index's saved folder (`BM25Index.save`)."""
    with tempfile.TemporaryDirectory() as folder:
        index.save(folder)
        return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file())


def queries_per_second(index: BM25Index, queries: list[str], k: int) -> float:
    """Queries/s of `index.search` over the queries in one call."""
    start = time.perf_counter()
    index.search(queries, k)
    return len(queries) / (time.perf_counter() - start)


def haystack_queries_per_second(ids: list[str], texts: list[str], queries: list[str], k: int) -> float:
    """Queries/s of Haystack's `InMemoryDocumentStore.bm25_retrieval` (BM25L) on the same corpus."""
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore(shared=False)
    store.write_documents([Document(id=doc_id, content=text) for doc_id, text in zip(ids, texts, strict=True)])
    start = time.perf_counter()
    for query in queries:
        store.bm25_retrieval(query, top_k=k)
    return len(queries) / (time.perf_counter() - start)


def main() -> None:
    """Prints the measurements."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--words", type=int, default=100, help="words per passage")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument(
        "--haystack-passages", type=int, default=20_000, help="Haystack side by side at this size (0: skip)"
    )
    parser.add_argument("--haystack-queries", type=int, default=20)
    parser.add_argument("--build", choices=(*BUILDS, "both"), help="the index build at scale instead (see above)")
    parser.add_argument(
        "--shard-size", type=int, help="passages per shard, with --build (default: sized by the memory budget)"
    )
    parser.add_argument(
        "--job-questions", type=int, nargs="*", default=[], help="with --build ray or both: then the job over the index"
    )
    parser.add_argument("--model", default="models/minilm-qa", help="with --job-questions: the reader")
    parser.add_argument("--work", type=Path, help="with --build: folder for the documents and the indexes, kept there")
    parser.add_argument("--add-share", type=float, help="with --build: add this share more passages to the Ray build")
    parser.add_argument("--split-length", type=int, help="with --build: index passages of this many words of each")
    parser.add_argument("--split-overlap", type=int, default=0, help="with --split-length: words shared")
    parser.add_argument("--search", metavar="INDEX", help="only the side by side search over this index folder")
    parser.add_argument(
        "--ray-queries", type=int, default=0, help="with --search: also this many queries by the job's stages on Ray"
    )
    parser.add_argument(
        "--ray-stages-per-cpu",
        type=float,
        nargs="+",
        help="with --ray-queries: the job's retrieval stages per CPU, each value in turn (default: the job's)",
    )
    # One build measured in this process (what --build runs, a process per build).
    parser.add_argument("--measure", choices=BUILDS, help=argparse.SUPPRESS)
    parser.add_argument("--documents", help=argparse.SUPPRESS)
    parser.add_argument("--index", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--added", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        queries = synthetic_texts(args.queries, 8, seed=1)
        measured = measure_build(args.measure, args.documents, args.index, args.shard_size, queries, args.top_k,
                                 args.added, (args.split_length, args.split_overlap))  # fmt: skip
        args.result.write_text(json.dumps(measured))
        return
    if args.build:
        compare_builds(args)
        return
    if args.search:
        from jobs.retrieval.stages import BM25_STAGES_PER_CPU

        per_cpu = args.ray_stages_per_cpu or [BM25_STAGES_PER_CPU]
        search_index(args.search, args.queries, args.top_k, args.ray_queries, per_cpu)
        return

    texts = synthetic_texts(args.passages, args.words, seed=0)
    ids = [f"p{i}" for i in range(len(texts))]
    queries = synthetic_texts(args.queries, 8, seed=1)  # 8-word queries, common words included
    start = time.perf_counter()
    index = BM25Index.build(ids, texts)
    build_s = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(texts):,} passages of {args.words} words: build {build_s:.1f} s, {len(index.vocabulary):,} terms, "
        f"{index.postings.doc_indices.size:,} postings, peak RSS {peak_mib:,.0f} MiB, "
        f"{index_bytes_on_disk(index) / 2**20:,.0f} MiB on disk, "
        f"posting arrays {sum(array.nbytes for array in vars(index.postings).values()) / 2**20:,.0f} MiB in memory"
    )
    print(f"search top-{args.top_k}: {queries_per_second(index, queries, args.top_k):,.0f} queries/s")
    if args.haystack_passages:
        small_texts, small_ids = texts[: args.haystack_passages], ids[: args.haystack_passages]
        small = BM25Index.build(small_ids, small_texts)
        ours = queries_per_second(small, queries, args.top_k)
        theirs = haystack_queries_per_second(small_ids, small_texts, queries[: args.haystack_queries], args.top_k)
        print(
            f"{len(small_texts):,} passages: ours {ours:,.0f} queries/s, Haystack {theirs:,.1f} queries/s "
            f"({ours / theirs:,.0f}x)"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["quality"]:
        from jobs.bench.retrieval_quality import main as quality

        quality(sys.argv[2:])
    elif sys.argv[1:2] == ["dense"]:
        from jobs.bench.dense_search import main as dense

        dense(sys.argv[2:])
    else:
        main()
