"""A resume with the model's files changed in the same folder is refused unless --overwrite, like changed settings."""

import json
import shutil
from pathlib import Path

import pytest

from tests.jobs.conftest import TEXTS, run_job, write_corpus

SETTINGS = ["--top-k", "2", "--max-seq-length", "64", "--stride", "16"]


def rewrite_weights(model: Path) -> None:
    """The folder's weights replaced by others of the same shapes (as a user copies newer weights over the old)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = model / "model.safetensors"
    weights = load_file(path)
    save_file({name: tensor + 0.01 if tensor.is_floating_point() else tensor for name, tensor in weights.items()},
              path, metadata={"format": "pt"})  # fmt: skip
    assert not torch.equal(load_file(path)["qa_outputs.weight"], weights["qa_outputs.weight"])


def test_changed_weights_are_refused_unless_overwrite(
    tmp_path: Path, tiny_bert_model: Path, capsys: pytest.CaptureFixture
) -> None:
    """The runs are in-process (no Ray in this module): the output folder's identity is the driver's, either way."""
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_model, model)
    paths = write_corpus(
        tmp_path, {"d1": TEXTS[2][:400], "d2": TEXTS[4][:400]}, {"q1": ("What does it return?", ["d1", "d2"])}
    )
    output = tmp_path / "out"
    args = ["--questions", paths["questions"], "--documents", paths["documents"], "--model", model,
            "--output", output, *SETTINGS]  # fmt: skip
    assert run_job(*args) == 0
    recorded = json.loads((output / "_job.json").read_text())["model"]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(recorded["files"])
    assert json.loads((output / "manifest.json").read_text())["model"] == recorded
    capsys.readouterr()

    rewrite_weights(model)
    assert run_job(*args) == 2
    assert (
        f"{output}: holds the output of a run with other model files: the model's files changed "
        "(model.safetensors). Pass --overwrite to replace it" in capsys.readouterr().err
    )
    assert json.loads((output / "_job.json").read_text())["model"] == recorded, "a refused run changes nothing"

    assert run_job(*args, "--overwrite") == 0
    assert json.loads((output / "_job.json").read_text())["model"] != recorded
