"""What `auto` precision picks, from what the device reports (pretended here, so that every branch runs anywhere)."""

import pytest
import torch

from qa_core.hardware import cpu_description, fast_bf16, resolve_precision


@pytest.mark.parametrize(("major", "fast"), [(7, False), (8, True), (9, True)])  # Volta/Turing, Ampere, Hopper
def test_a_gpu_runs_bf16_fast_from_ampere_on(monkeypatch, major, fast):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 0))
    assert fast_bf16("cuda:0") is fast
    assert resolve_precision("auto", "cuda:0") == ("bf16" if fast else "fp32")


def test_explicit_precisions_are_honoured_and_unknown_ones_refused(monkeypatch):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {})  # a CPU without bf16 units
    assert [resolve_precision(name, "cpu") for name in ("fp32", "bf16", "auto")] == ["fp32", "bf16", "fp32"]
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, auto, not 'fp16'"):
        resolve_precision("fp16", "cpu")


def test_the_cpu_description_lists_only_the_extensions_present(monkeypatch):
    present = {"cpu_name": "A CPU", "amx_tile": True, "amx_bf16": True, "avx512_bf16": False, "num_physical_cores": 4}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: present)
    described = cpu_description()
    assert described["extensions"] == ["amx_bf16", "amx_tile"] and described["cores"] == 4
    assert described["threads"] == torch.get_num_threads() and described["capability"]
