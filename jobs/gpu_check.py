"""
The benchmark on one GPU: `python -m jobs.gpu_check [--model DIR] [--questions N] [--precision bf16] [bench flags]`.

Runs `jobs.bench` on the first CUDA device: Haystack's reader, `run_batch` and the forward-only limit in fp32
and in half precision (bf16 by default), and the Ray job (one reader actor per GPU); then prints each row's
sequences/s and model FLOP utilisation (MFU: the model's FLOPs over the real, unpadded tokens per second, over
the device's dense half-precision peak, looked up by name or given with `--peak-tflops`), and what half
precision costs in agreement with fp32 (share of questions whose best answer is unchanged, largest score
difference). The GPU path itself lives in the reader: inputs in pinned host memory copied without blocking,
`torch.inference_mode`, one model per Ray actor.

Without a GPU it runs the same on the CPU, as a smoke check (no MFU unless `--peak-tflops` is given).
Flags it does not know are passed to `jobs.bench` (e.g. `--skip haystack,ray`).
"""

import argparse
import sys
from typing import Any

import torch

from jobs.bench import throughput as bench


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark on the GPU (or the CPU) and prints sequences/s and MFU; returns the benchmark's result."""
    parser = argparse.ArgumentParser(prog="python -m jobs.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="QA model folder (default: MiniLM-L6 built locally)")
    parser.add_argument("--questions", type=int, default=2000)
    parser.add_argument("--precision", choices=["bf16", "fp16"], default="bf16", help="the half-precision rows")
    parser.add_argument("--max-batch-size", type=int, default=128, help="sequences per forward pass (default 128)")
    parser.add_argument("--output", default="out/bench/gpu.json")
    args, passed = parser.parse_known_args(argv)
    on_gpu = torch.cuda.is_available()
    device = "cuda:0" if on_gpu else "cpu"
    bench_argv = ["--device", device, "--precision", args.precision, "--questions", str(args.questions)]
    bench_argv += ["--max-batch-size", str(args.max_batch_size), "--rounds", "1", "--output", args.output]
    bench_argv += ["--model", args.model] if args.model else []
    result = bench.main(bench_argv + passed)
    name = torch.cuda.get_device_name(0) if on_gpu else "no GPU: CPU smoke check"
    print(f"\ngpu_check on {device} ({name}):")
    for row in result["rows"]:
        rate, mfu = row["sequences_per_s"], row["mfu"]
        print(
            f"  {row['row']:<22} {rate:10.1f} sequences/s"
            + (f"  MFU {mfu:.1%}" if mfu is not None else "  MFU n/a")
            + (f"  ({row['agreement']})" if row["agreement"] else "")
        )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
