"""
What the machine's processors can do fast, detected where the model runs (never assumed): the CPU's model and
matrix extensions (AMX, AVX-512 BF16, VNNI), a GPU's bfloat16 support, and so which precision `auto` picks.
"""

from typing import Any

import torch

PRECISIONS = ("fp32", "bf16", "auto")
# The model dtype of each precision a model runs in (fp16: a dtype given in model_kwargs, for GPUs).
PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# The CPU features that decide the precision and that the benchmark reports, as torch.cpu.get_capabilities() names
# them: AMX tiles with bf16 and int8 matrix products, AVX-512 with bf16 dot products, and the int8 dot products.
MATRIX_EXTENSIONS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni", "avx_vnni")
# The CPU extensions with native bf16 matrix products, on which `auto` picks bf16: AMX's bf16 tiles (Intel Xeon
# since Sapphire Rapids) and AVX-512 BF16's dot products (Intel Cooper Lake and later, AMD Zen 4 and later). On an
# AMD EPYC with AVX-512 BF16 and no AMX, MiniLM's forward pass ran 1.9x faster in bf16 than in fp32 (docs/benchmarks.md,
# "bf16"); without them bf16 is emulated and slower than fp32.
FAST_BF16_CPU_EXTENSIONS = ("amx_bf16", "avx512_bf16")


def cpu_description() -> dict[str, Any]:
    """
    The CPU as torch sees it: `model` (its name), `capability` (the vector ISA ATen's kernels use, e.g. `AVX512`),
    `extensions` (the matrix extensions present, of `MATRIX_EXTENSIONS`), `cores` and `threads` (torch's intra-op
    threads).
    """
    capabilities = torch.cpu.get_capabilities()
    return {
        "model": _cpu_model_name() or capabilities.get("cpu_name", "unknown"),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "extensions": [name for name in MATRIX_EXTENSIONS if capabilities.get(name)],
        "cores": capabilities.get("num_physical_cores"),
        "threads": torch.get_num_threads(),
    }


def _cpu_model_name() -> str | None:
    """The first `model name` line of /proc/cpuinfo (Linux), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def fast_bf16(device: torch.device | str) -> bool:
    """Whether bfloat16 matrix products run fast on the device: a CUDA GPU that supports them natively (Ampere and
    later), or a CPU with one of `FAST_BF16_CPU_EXTENSIONS`."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    capabilities = torch.cpu.get_capabilities()
    return device.type == "cpu" and any(capabilities.get(name) for name in FAST_BF16_CPU_EXTENSIONS)


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """
    The precision a model runs in on the device: `fp32` and `bf16` as asked, `auto` as `bf16` where `fast_bf16`,
    else `fp32`.

    :raises ValueError: For a precision not in `PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision == "auto":
        return "bf16" if fast_bf16(device) else "fp32"
    return precision
