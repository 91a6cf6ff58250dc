"""
`python -m qa_core.local_models KIND OUTPUT_DIR [--seed N]`: builds one local model of any kind, the random-head
ones of `qa_core.local_models`, `minilm-squad`, which `qa_core.training.minilm_squad` fine-tunes, and
`minilm-ranker`, which `qa_core.training.minilm_ranker` fine-tunes.
"""

import argparse

from qa_core.local_models import BUILDERS, MEANINGLESS, RANDOM_RANKER
from qa_core.models import show_model_library_output
from qa_core.training.minilm_ranker import build_minilm_ranker
from qa_core.training.minilm_squad import build_minilm_squad

EVERY_BUILDER = {**BUILDERS, "minilm-squad": build_minilm_squad, "minilm-ranker": build_minilm_ranker}
TRAINED_KINDS = ("minilm-squad", "minilm-ranker")  # kinds whose answers or scores mean something
CROSS_ENCODERS = ("minilm-cross-encoder", "minilm-ranker")  # the kinds that rank passages rather than answer


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m qa_core.local_models`."""
    parser = argparse.ArgumentParser(
        prog="python -m qa_core.local_models",
        description="Build a local QA model or cross-encoder offline. Only minilm-squad and minilm-ranker are "
        "trained; the others have random heads, for smoke runs and tests only.",
    )
    parser.add_argument("kind", choices=tuple(EVERY_BUILDER), help="the kind of model to build")
    parser.add_argument("output_dir", help="the folder to write the model to")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random QA head (and of training)")
    parser.add_argument("--verbose", action="store_true", help="also show transformers' load reports and progress bars")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: build one local model."""
    args = build_parser().parse_args(argv)
    show_model_library_output(args.verbose)
    path = EVERY_BUILDER[args.kind](args.output_dir, seed=args.seed)
    what, meaningless = ("cross-encoder", RANDOM_RANKER) if args.kind in CROSS_ENCODERS else ("QA model", MEANINGLESS)
    print(f"Built {args.kind} {what} in {path}." + ("" if args.kind in TRAINED_KINDS else f" {meaningless}"))


if __name__ == "__main__":
    main()
