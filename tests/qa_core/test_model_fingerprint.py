"""The model fingerprint: what a resumed run compares to recognise changed weights, configuration or tokenizer."""

import time
from pathlib import Path

from qa_core.models import ModelSettings, changed_model_files, model_fingerprint


def model_folder(root: Path) -> Path:
    folder = root / "model"
    (folder / ".cache" / "huggingface").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "tokenizer.json").write_text('{"version": "1.0"}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "README.md").write_text("A model.")
    (folder / ".cache" / "huggingface" / "download.lock").write_text("")
    return folder


def test_a_folder_is_fingerprinted_by_each_file_size_and_hash(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    fingerprint = model_fingerprint(ModelSettings(model=str(folder)))
    assert sorted(fingerprint["files"]) == ["config.json", "model.safetensors", "tokenizer.json"]  # no docs, no .cache
    assert fingerprint["files"]["model.safetensors"]["size"] == 256 * 64
    assert fingerprint == model_fingerprint(ModelSettings(model=str(folder)))  # stable


def test_changed_weights_tokenizer_or_added_files_change_it_and_documentation_does_not(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    before = model_fingerprint(ModelSettings(model=str(folder)))
    (folder / "README.md").write_text("Another description.")
    assert model_fingerprint(ModelSettings(model=str(folder))) == before
    weights = folder / "model.safetensors"
    weights.write_bytes(bytes(reversed(range(256))) * 64)  # same size
    (folder / "vocab.txt").write_text("[PAD]\n")
    after = model_fingerprint(ModelSettings(model=str(folder)))
    assert changed_model_files(before, after) == ["model.safetensors", "vocab.txt"]


def test_a_hub_model_is_its_name_and_revision_with_nothing_downloaded(tmp_path: Path) -> None:
    settings = ModelSettings(model="deepset/roberta-base-squad2", model_kwargs={"revision": "v1.0"})
    assert model_fingerprint(settings) == {"hub": "deepset/roberta-base-squad2", "revision": "v1.0"}
    assert model_fingerprint(ModelSettings(model="deepset/roberta-base-squad2"))["revision"] is None


def test_a_few_hundred_megabytes_hash_in_seconds(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    with (folder / "model.safetensors").open("wb") as file:
        for _ in range(200):
            file.write(b"\x01" * (1 << 20))
    started = time.perf_counter()
    fingerprint = model_fingerprint(ModelSettings(model=str(folder)))
    assert fingerprint["files"]["model.safetensors"]["size"] == 200 << 20
    assert time.perf_counter() - started < 10  # about a second idle; generous for a loaded machine
