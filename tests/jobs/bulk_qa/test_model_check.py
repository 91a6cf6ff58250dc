"""The model is checked before any worker starts: a hub id that cannot be downloaded fails at once, clearly."""

from pathlib import Path

import pytest

import jobs.bulk_qa.inputs
from jobs.bulk_qa.inputs import check_model
from jobs.storage import InputError
from qa_core.models import DEFAULT_TOKEN, ModelSettings
from tests.jobs.conftest import run_job


def test_unreachable_hub_model_fails_at_once_with_the_way_out(
    monkeypatch: pytest.MonkeyPatch, capsys, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: the hub cannot be reached
    downloads = []  # "at once": transformers, which would retry the hub for half a minute, is never asked
    monkeypatch.setattr(jobs.bulk_qa.inputs, "load_config", lambda *args: downloads.append(args))
    status = run_job(
        "--questions", "data/sample/questions.parquet", "--documents", "data/sample/documents.parquet",
        "--output", tmp_path / "never-written", "--model", "deepset/roberta-base-squad2-distilled",
    )  # fmt: skip
    assert status == 2
    assert downloads == []
    message = capsys.readouterr().err
    assert "--model deepset/roberta-base-squad2-distilled: not a local folder" in message
    assert "cannot be reached" in message and "Point --model at a local folder" in message
    assert "python -m qa_core.local_models minilm models/minilm-qa" in message
    assert not (tmp_path / "never-written").exists()


def test_missing_local_model_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--model .*/missing: the folder does not exist"):
        check_model(ModelSettings(str(tmp_path / "missing")), DEFAULT_TOKEN)


def test_local_model_folder_passes_and_a_folder_without_weights_does_not(tiny_bert_model: Path, tmp_path) -> None:
    assert check_model(ModelSettings(str(tiny_bert_model)), DEFAULT_TOKEN) is None
    (tmp_path / "config.json").write_text((tiny_bert_model / "config.json").read_text())
    with pytest.raises(InputError, match="the folder holds no model weights"):
        check_model(ModelSettings(str(tmp_path)), DEFAULT_TOKEN)
