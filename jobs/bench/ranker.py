"""
The cross-encoder ranker's benchmarks (print only):

- `quality`: held-out cloze questions (the paragraphs `minilm-ranker` and `minilm-squad` never trained on) over a
  corpus of at least 10,000 passages: the held-out paragraphs, the train paragraphs, and seeded word windows of the
  train paragraphs' text (distractors that never hold a held-out question's sentence). Recall@1 of BM25 alone
  against BM25's top `--candidates` reranked by `--model`, each question's relevant passage its own paragraph. With
  `--reader`, the official EM / F1 of that reader over BM25's top N passages and over the ranker's top N (the bulk
  job's `--retriever-top-k` and `--ranker-top-k`), each question's best answer, for each N of `--read` (counts
  separated by commas).

      python -m jobs.bench.ranker quality --model models/minilm-ranker [--reader models/minilm-squad --read 1,3]

- `throughput`: `CrossEncoderRanker` against Haystack's `SentenceTransformersSimilarityRanker` on the same
  `--queries` x `--documents` pairs of mixed length (`jobs.bench.data.make_mixed_workload`), in one run, the
  largest score difference between the two checked: pairs/s and their ratio.

      python -m jobs.bench.ranker throughput [--model FOLDER] [--queries 200] [--documents 20]
"""

import argparse
import time
from dataclasses import replace
from pathlib import Path

from jobs.bench.data import local_model, make_mixed_workload
from jobs.bench.retrieval_quality import end_to_end
from qa_core.document import Document
from qa_core.hardware import cpu_description
from qa_core.local_models import TEXT_FILE
from qa_core.ranker import CrossEncoderRanker
from qa_core.reader import ExtractiveReader
from qa_core.retrieval import BM25Retriever
from qa_core.retrieval.quality import retrieval_quality
from qa_core.squad import SquadDataset
from qa_core.training.cloze import generate_cloze, read_paragraphs
from qa_core.training.minilm_squad import CLOZE
from qa_core.training.ranking import word_windows


def corpus(passages: int, seed: int) -> tuple[list[Document], list, dict[str, str]]:
    """
    The quality benchmark's corpus and questions.

    :returns: The passages (held-out paragraphs, train paragraphs, then windows up to `passages`), the held-out
        answerable questions, and each question's relevant passage id.
    """
    cloze = replace(CLOZE, seed=seed)
    split = generate_cloze(read_paragraphs(TEXT_FILE, cloze), cloze)
    heldout = sorted(split.heldout_paragraphs)
    train = sorted({example.context for example in split.train} - split.heldout_paragraphs)
    documents = [Document(content=text, id=f"heldout-{index}") for index, text in enumerate(heldout)]
    documents += [Document(content=text, id=f"train-{index}") for index, text in enumerate(train)]
    windows = word_windows(train, passages - len(documents), seed)
    documents += [Document(content=window.text, id=f"window-{index}") for index, window in enumerate(windows)]
    ids = {text: f"heldout-{index}" for index, text in enumerate(heldout)}
    questions = [example for example in split.heldout if example.answers]
    return documents, questions, {example.id: ids[example.context] for example in questions}


def quality(
    model: str, passages: int, candidates: int, seed: int, reader: str | None, read: tuple[int, ...]
) -> None:
    """
    Prints recall@1 of BM25 and of BM25's top `candidates` reranked, and the reranking's pairs/s; with `reader`, its
    EM / F1 over the first `count` passages of each, for each count in `read`.
    """
    documents, questions, relevant = corpus(passages, seed)
    print(f"cpu: {cpu_description()}; {len(documents)} passages, {len(questions)} held-out answerable questions")
    retriever = BM25Retriever(documents=documents, top_k=candidates)
    retriever.warm_up()
    queries = [example.question for example in questions]
    hits = retriever.run_batch(queries)["documents"]
    ranker = CrossEncoderRanker(model=model, device="cpu", top_k=candidates)
    ranker.warm_up()
    started = time.perf_counter()
    reranked = ranker.run_batch(queries, hits)["documents"]
    seconds = time.perf_counter() - started
    gold = {example.id: [relevant[example.id]] for example in questions}
    for name, rows in (("bm25", hits), (f"bm25 top-{candidates} -> ranker", reranked)):
        found = {example.id: [doc.id for doc in row] for example, row in zip(questions, rows, strict=True)}
        scores = retrieval_quality(found, gold, cutoffs=(1, 3, candidates))
        print(f"{name}: recall@1 {scores['recall@1']:.3f}, recall@3 {scores['recall@3']:.3f}, "
              f"recall@{candidates} {scores[f'recall@{candidates}']:.3f}, MRR {scores['mrr']:.3f}")  # fmt: skip
    pairs = sum(len(row) for row in hits)
    print(f"reranking: {pairs} pairs in {seconds:.1f} s ({pairs / seconds:.1f} pairs/s)")
    if reader is not None:
        extractive = ExtractiveReader(model=reader, device="cpu")
        extractive.warm_up()
        dataset = SquadDataset(examples=questions, version="2.0", has_gold=True)
        for count in read:
            for name, rows in (("bm25", hits), ("ranker", reranked)):
                texts = {example.id: [doc.content for doc in row[:count]]
                         for example, row in zip(questions, rows, strict=True)}  # fmt: skip
                scores = end_to_end(extractive, dataset, texts)
                print(f"reader over {name} top-{count}: EM {scores['exact']:.1f}, F1 {scores['f1']:.1f}")


def throughput(model: str, queries: int, documents: int, repeats: int) -> None:
    """Prints both rankers' pairs/s on the same pairs, their ratio and the largest score difference."""
    from haystack import Document as HaystackDocument
    from haystack_integrations.components.rankers.sentence_transformers.sentence_transformers_similarity import (
        SentenceTransformersSimilarityRanker,
    )

    workload = make_mixed_workload(queries, docs_per_question=documents)
    pairs = sum(len(docs) for docs in workload.documents)
    print(f"cpu: {cpu_description()}; {queries} queries x {documents} documents ({pairs} pairs), model {model}")
    ours = CrossEncoderRanker(model=model, device="cpu", top_k=documents)
    ours.warm_up()
    haystack = SentenceTransformersSimilarityRanker(model=model, device=None, top_k=documents)
    haystack.warm_up()
    haystack_documents = [[HaystackDocument(id=doc.id, content=doc.content) for doc in docs]
                          for docs in workload.documents]  # fmt: skip

    def run_ours() -> list[dict[str, float]]:
        ranked = ours.run_batch(workload.queries, workload.documents)["documents"]
        return [{doc.id: doc.score for doc in row} for row in ranked]

    def run_haystack() -> list[dict[str, float]]:
        return [{doc.id: doc.score for doc in haystack.run(query=query, documents=docs)["documents"]}
                for query, docs in zip(workload.queries, haystack_documents, strict=True)]  # fmt: skip

    seconds: dict[str, list[float]] = {"ours": [], "haystack": []}
    scores = {}
    for repeat in range(repeats):
        order = (("ours", run_ours), ("haystack", run_haystack))
        for name, run in order if repeat % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            scores[name] = run()
            seconds[name].append(time.perf_counter() - started)
    difference = max(abs(score - theirs[doc_id]) for row, theirs in zip(scores["ours"], scores["haystack"], strict=True)
                     for doc_id, score in row.items())  # fmt: skip
    rates = {name: pairs / min(times) for name, times in seconds.items()}
    print(f"fp32: ours {rates['ours']:.1f} pairs/s, Haystack {rates['haystack']:.1f} pairs/s, "
          f"ratio {rates['ours'] / rates['haystack']:.2f}x, largest score difference {difference:.2e} "
          f"(s: ours {' '.join(f'{t:.1f}' for t in seconds['ours'])}; "
          f"Haystack {' '.join(f'{t:.1f}' for t in seconds['haystack'])})")  # fmt: skip


def counts(text: str) -> tuple[int, ...]:
    """`--read`'s value: positive counts separated by commas."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not counts separated by commas: {text!r}") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"counts must be at least 1: {text!r}")
    return values


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m jobs.bench.ranker", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rank = commands.add_parser("quality", help="recall@1 of BM25 alone and reranked, on held-out cloze questions")
    rank.add_argument("--model", required=True, help="the cross-encoder (e.g. minilm-ranker's folder)")
    rank.add_argument("--passages", type=int, default=10_000, help="passages in the corpus")
    rank.add_argument("--candidates", type=int, default=20, help="BM25 hits reranked per question")
    rank.add_argument("--seed", type=int, default=0, help="the cloze split's seed (the model's --seed)")
    rank.add_argument("--reader", default=None, help="a QA model (minilm-squad's folder): EM / F1 with and without")
    rank.add_argument("--read", type=counts, default=(3,),
                      help="passages the reader reads a question (comma-separated: one EM / F1 line for each)")
    speed = commands.add_parser("throughput", help="pairs/s against Haystack's ranker on the same pairs")
    speed.add_argument("--model", default=None, help="the cross-encoder (default: minilm-cross-encoder, built)")
    speed.add_argument("--queries", type=int, default=200)
    speed.add_argument("--documents", type=int, default=20, help="documents per query")
    speed.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "quality":
        quality(args.model, args.passages, args.candidates, args.seed, args.reader, args.read)
    else:
        model = args.model or str(local_model("minilm-cross-encoder"))
        throughput(str(Path(model)), args.queries, args.documents, args.repeats)


if __name__ == "__main__":
    main()
