"""`python -m jobs.train` end to end on a tiny set: in this process and data-parallel on Ray Train."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from jobs.train.cli import build_parser, main, recipe
from qa_core import Document, ExtractiveReader
from qa_core.annotation import PredictedSpan, Prediction, label_studio_tasks
from qa_core.local_models import TEXT_FILE
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample, write_squad_json
from qa_core.training.cloze import ClozeConfig, generate_cloze, read_paragraphs
from qa_core.training.loop import TrainConfig

RECIPE = ["--max-seq-length", "96", "--stride", "16", "--no-progress"]
# 2 Ray workers each take half of every global batch and DDP averages their gradients, so they take 1 worker's
# steps; only float rounding differs (summation order, batch shapes, 1 vs 2 threads): measured <= 8e-7.
LOSS_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def squad_files(tmp_path_factory) -> dict[str, Path]:
    """Cloze questions from the project's text: 34 to train on (76 features), 12 held-out ones to score."""
    split = generate_cloze(read_paragraphs(TEXT_FILE), ClozeConfig(seed=0))
    folder = tmp_path_factory.mktemp("squad")
    files = {"train": folder / "train.json", "eval": folder / "eval.json"}
    write_squad_json(split.train[:34], files["train"], version="2.0")
    write_squad_json(split.heldout[:12], files["eval"], version="2.0")
    return files


@pytest.fixture(scope="module")
def no_dropout_model(tiny_bert_model: Path, tmp_path_factory) -> Path:
    """The tiny BERT without dropout, so that runs with different worker counts draw no different masks."""
    folder = tmp_path_factory.mktemp("tiny-bert-no-dropout")
    for path in tiny_bert_model.iterdir():
        shutil.copy2(path, folder / path.name)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_recipe_flags_keep_the_defaults_not_given_and_read_none_for_optional_fields() -> None:
    required = ["--train", "t.json", "--output", "out"]
    assert recipe(build_parser().parse_args(required)) == TrainConfig()
    args = build_parser().parse_args([*required, "--max-grad-norm", "none", "--max-steps", "7", "--no-progress"])
    assert recipe(args) == TrainConfig(max_grad_norm=None, max_steps=7, progress=False)
    assert recipe(build_parser().parse_args([*required, "--max-steps", "NONE"])).max_steps is None


def summary(output: Path) -> dict:
    return json.loads((output / "training.json").read_text())


def test_the_cli_writes_a_model_the_reader_loads(tiny_bert_model, squad_files, tmp_path, capsys):
    output = tmp_path / "model"
    args = [
        "--train",
        squad_files["train"],
        "--eval",
        squad_files["eval"],
        "--output",
        output,
        "--model",
        tiny_bert_model,
        "--epochs",
        "2",
        "--batch-size",
        "8",
        *RECIPE,
    ]
    assert main([str(arg) for arg in args]) == 0
    assert f"model written to {output}" in capsys.readouterr().out
    result = summary(output)
    steps_per_epoch = result["epochs"][0]["global_step"]  # features (some questions take 2 windows) / 8
    assert steps_per_epoch >= 4 and result["global_step"] == len(result["losses"]) == 2 * steps_per_epoch
    assert [epoch["eval_total"] for epoch in result["epochs"]] == [12, 12]
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == ["epoch-1", "epoch-2"]
    assert not list(output.glob("*.pt")) and (output / "model.safetensors").is_file()

    reader = ExtractiveReader(model=output, top_k=1, max_seq_length=96, stride=16)
    reader.warm_up()
    answers = reader.run("What is a deque?", [Document(content="A deque is a list-like container.")])["answers"]
    assert len(answers) == 2  # one span and the no-answer entry

    # checkpoints are not overwritten by accident; --resume picks up the finished run and changes nothing
    before = load_file(output / "model.safetensors")
    assert main([str(arg) for arg in args]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main([str(arg) for arg in [*args, "--resume"]]) == 0
    after = load_file(output / "model.safetensors")
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_bad_training_data_exits_2_naming_the_questions(tiny_bert_model, tmp_path, capsys):
    examples = [
        SquadExample("good-1", "t", "What is stored?", "Mappings are stored in a list.", [GoldAnswer("a list", 23)]),
        SquadExample("misaligned-1", "t", "What is stored?", "Mappings are stored in a list.", [GoldAnswer("list", 3)]),
        SquadExample("empty-context-1", "t", "What is stored?", "   ", [], is_impossible=True),
    ]
    write_squad_json(examples, tmp_path / "bad.json", version="2.0")
    args = ["--train", tmp_path / "bad.json", "--output", tmp_path / "out", "--model", tiny_bert_model, *RECIPE]
    assert main([str(arg) for arg in args]) == 2
    error = capsys.readouterr().err
    assert "'misaligned-1'" in error and "'empty-context-1'" in error and "'good-1'" not in error
    assert not (tmp_path / "out").exists()


def test_a_question_too_long_for_the_window_exits_2_naming_it(tiny_bert_model, tmp_path, capsys):
    question = "What is stored " + "in the list " * 40 + "?"
    examples = [SquadExample("long-q", "t", question, "Mappings are stored in a list.", [GoldAnswer("a list", 23)])]
    write_squad_json(examples, tmp_path / "long.json", version="2.0")
    args = ["--train", tmp_path / "long.json", "--output", tmp_path / "out", "--model", tiny_bert_model, *RECIPE]
    assert main([str(arg) for arg in args]) == 2
    assert "long-q" in capsys.readouterr().err


def test_two_ray_workers_follow_the_loss_curve_of_one(local_ray, no_dropout_model, squad_files, tmp_path):
    """The same recipe in this process (1 worker) and on 2 Ray Train workers (gloo DDP, half a batch each)."""
    runs = {}
    for workers in (1, 2):
        output = tmp_path / f"workers-{workers}"
        args = ["--train", squad_files["train"], "--output", output, "--model", no_dropout_model]
        args += ["--epochs", "2", "--batch-size", "8", "--learning-rate", "1e-3", *RECIPE]
        if workers > 1:
            args += ["--num-workers", str(workers)]
        assert main([str(arg) for arg in args]) == 0
        runs[workers] = summary(output)["losses"]
        assert sorted(path.name for path in (output / "checkpoints").glob("epoch-*")) == ["epoch-1", "epoch-2"]
    # 76 features in batches of 8: 10 steps an epoch, the last batch of 4 (a batch with fewer features than workers
    # would be dropped on 2 workers only)
    assert len(runs[2]) == len(runs[1]) == 20
    assert runs[2] == pytest.approx(runs[1], abs=LOSS_TOLERANCE)
    assert runs[2][-1] < runs[2][0]  # and it learns
    # the Ray run's checkpoints hold both workers' RNG state (Ray merged the workers' checkpoint folders)
    assert sorted(p.name for p in (tmp_path / "workers-2" / "checkpoints" / "epoch-2").glob("rng-*")) == [
        "rng-rank0.pt",
        "rng-rank1.pt",
    ]


def test_a_label_studio_export_trains_on_its_reviewed_tasks(tiny_bert_model, tmp_path, capsys):
    context = "Mappings are stored in a list. 🗺️ Keys are hashed."
    examples = [SquadExample(f"q{i}", None, question, context) for i, question in enumerate(
        ["What is stored?", "Where are they stored?", "What is hashed?", "What is sorted?"], start=1)]  # fmt: skip
    predictions = {e.id: Prediction("answered", "a list", 0.1, [PredictedSpan("a list", 23, 0.9)]) for e in examples}
    tasks = label_studio_tasks(SquadDataset(examples, "2.0", False), predictions)
    keys = {"start": 34, "end": 38, "text": "Keys", "labels": ["Answer"]}  # after the emoji: code point offsets
    results = [tasks[0]["predictions"][0]["result"], [{"type": "labels", "value": keys}],
               [{"type": "choices", "value": {"choices": ["No answer"]}}]]  # fmt: skip
    export = [{"id": i, **task, "annotations": [{"result": result}] if result else []}
              for i, (task, result) in enumerate(zip(tasks, [*results, None], strict=True))]  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    args = ["--train", path, "--output", tmp_path / "out", "--model", tiny_bert_model, "--epochs", "1",
            "--batch-size", "2", *RECIPE]  # fmt: skip
    assert main([str(arg) for arg in args]) == 0
    assert "1 task(s) of the Label Studio export have no review and are left out: 'q4'" in capsys.readouterr().err
    assert summary(tmp_path / "out")["global_step"] == 2  # 3 reviewed questions, one window each, 2 a batch

    export[1]["annotations"][0]["result"][0]["value"]["end"] = 99
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    assert main([str(arg) for arg in [*args[:3], tmp_path / "out2", *args[4:]]]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("(question 'q2'): 'annotations[0].result[0].value' offsets 34..99 are outside the context")
