"""
The retrieval benchmark (prints only): `qa_core.retrieval.BM25Index`'s build time, peak memory and queries/s on
synthetic passages made from the repository's local text, and Haystack's `InMemoryDocumentStore.bm25_retrieval`
side by side on the same queries at a size it can handle (20k passages by default), as a ratio.

    .venv/bin/python -m jobs.bench.retrieval --passages 100000 --haystack-passages 20000
"""

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from qa_core.local_models import TEXT_FILE
from qa_core.retrieval.index import BM25Index


def synthetic_texts(n: int, words_per_text: int, seed: int) -> list[str]:
    """`n` texts, each `words_per_text` consecutive words of the local text from a random start."""
    with TEXT_FILE.open(encoding="utf-8") as file:
        words = " ".join(json.loads(line)["text"] for line in file).split()
    starts = np.random.default_rng(seed).integers(0, len(words) - words_per_text, n)
    return [" ".join(words[start : start + words_per_text]) for start in starts]


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
    args = parser.parse_args()

    texts = synthetic_texts(args.passages, args.words, seed=0)
    ids = [f"p{i}" for i in range(len(texts))]
    queries = synthetic_texts(args.queries, 8, seed=1)  # 8-word queries, common words included
    start = time.perf_counter()
    index = BM25Index.build(ids, texts)
    build_s = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(texts):,} passages of {args.words} words: build {build_s:.1f} s, {len(index.vocabulary):,} terms, "
        f"{index.postings.weights.size:,} postings, peak RSS {peak_mib:,.0f} MiB, "
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
    main()
