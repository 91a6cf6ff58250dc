"""Fine-tuning: train features and their labels, the training loop, checkpoints, null-score predictions."""

import math
import pickletools
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoTokenizer

from qa_core.squad import GoldAnswer, SquadExample
from qa_core.tokenization import TokenizationSettings, tokenize_pairs
from qa_core.training.features import NULL_POSITION, answer_tokens, collate_features, prepare_train_features
from qa_core.training.loop import (
    RNG_STATE,
    TRAINER_STATE,
    TrainConfig,
    TrainHooks,
    epoch_batches,
    latest_checkpoint,
    linear_warmup_decay,
    load_model,
    qa_loss,
    read_checkpoint_info,
    train,
)
from qa_core.training.predict import evaluate_model, predict_squad

SENTENCES = [
    "A ChainMap groups multiple dicts or other mappings together to create a single, updateable view.",
    "The underlying mappings are stored in a list.",
    "That list is public and can be accessed or updated using the maps attribute.",
    "Lookups search the underlying mappings successively until a key is found.",
    "In contrast, writes, updates, and deletions only operate on the first mapping.",
    "A deque is a list-like container with fast appends and pops on either end.",
]
LONG_CONTEXT = " ".join(SENTENCES)
# LONG_CONTEXT (136 tokens) takes several windows; windows overlap by more than the longest answer (14 tokens),
# so every answer lies whole in some window.
WINDOWS = TokenizationSettings(max_seq_length=48, stride=16)


def example(qid: str, question: str, context: str, answer: str | None, occurrence: int = 0) -> SquadExample:
    """An example whose answer is the `occurrence`-th appearance of `answer` in the context (None: impossible)."""
    if answer is None:
        return SquadExample(qid, "t", question, context, [], is_impossible=True)
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(answer, start + 1)
    return SquadExample(qid, "t", question, context, [GoldAnswer(answer, start)])


EXAMPLES = [
    example("first", "What groups multiple dicts?", LONG_CONTEXT, "A ChainMap"),
    example("middle", "What is found by lookups?", LONG_CONTEXT, "the underlying mappings successively until a key"),
    example("last", "What has fast appends?", LONG_CONTEXT, "fast appends and pops on either end"),
    example("impossible", "Where is the river?", LONG_CONTEXT, None),
    example("short", "Where are mappings stored?", SENTENCES[1], "a list"),
]


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_model: Path):
    return AutoTokenizer.from_pretrained(tiny_bert_model)


def small_set(count: int) -> list[SquadExample]:
    """`count` answerable and impossible examples on single sentences."""
    pool = [
        example("s0", "What are stored in a list?", SENTENCES[1], "The underlying mappings"),
        example("s1", "What is public?", SENTENCES[2], "That list"),
        example("s2", "What do lookups search?", SENTENCES[3], "the underlying mappings"),
        example("s3", "What has fast appends?", SENTENCES[5], "A deque"),
        example("s4", "Where is the river?", SENTENCES[0], None),
        example("s5", "What operate on the first mapping?", SENTENCES[4], "writes, updates, and deletions"),
        example("s6", "What is the maps attribute used for?", SENTENCES[2], "accessed or updated"),
        example("s7", "Who wrote the sonnets?", SENTENCES[3], None),
    ]
    return [SquadExample(**{**vars(pool[i % len(pool)]), "id": f"e{i}"}) for i in range(count)]


# --- features ---------------------------------------------------------------------------------------------------


def test_labels_point_at_the_tokens_covering_exactly_the_answer(tokenizer):
    features = prepare_train_features(tokenizer, EXAMPLES, WINDOWS)
    labelled = {EXAMPLES[f.example_index].id for f in features if f.has_answer}
    assert labelled == {"first", "middle", "last", "short"}
    for feature in features:
        if feature.has_answer:
            gold = EXAMPLES[feature.example_index].answers[0]
            sequence = feature.sequence
            assert sequence.context_start <= feature.start_position <= feature.end_position < sequence.context_end
            start, end = sequence.char_starts[feature.start_position], sequence.char_ends[feature.end_position]
            assert (start, end) == (gold.answer_start, gold.answer_start + len(gold.text))


def straddling(tokenizer) -> SquadExample:
    """An example whose answer starts two tokens before the end of its first window (and fits the second)."""
    question = "What does a ChainMap do?"
    first = tokenize_pairs(tokenizer, [question], [LONG_CONTEXT], WINDOWS)[0]
    start = int(first.char_starts[first.context_end - 2])
    end = LONG_CONTEXT.index(" ", int(first.char_ends[first.context_end - 1]) + 2)
    return SquadExample("straddles", "t", question, LONG_CONTEXT, [GoldAnswer(LONG_CONTEXT[start:end], start)])


def test_answers_outside_a_window_and_impossible_questions_point_at_the_null_position(tokenizer):
    examples = [*EXAMPLES, straddling(tokenizer)]
    features = prepare_train_features(tokenizer, examples, WINDOWS)
    kinds = set()
    for feature in features:
        ex = examples[feature.example_index]
        sequence = feature.sequence
        if ex.is_impossible:
            kinds.add("impossible")
            assert (feature.start_position, feature.end_position) == (NULL_POSITION, NULL_POSITION)
            continue
        gold = ex.answers[0]
        first = sequence.char_starts[sequence.context_start]
        last = sequence.char_ends[sequence.context_end - 1]
        answer_start, answer_end = gold.answer_start, gold.answer_start + len(gold.text)
        inside = bool(first <= answer_start and answer_end <= last)
        overlaps = answer_start < last and first < answer_end
        kinds.add("inside" if inside else "straddles" if overlaps else "outside")
        assert feature.has_answer is inside
        if not inside:
            assert (feature.start_position, feature.end_position) == (NULL_POSITION, NULL_POSITION)
    assert kinds == {"impossible", "inside", "straddles", "outside"}  # the data exercises every case


def test_train_windows_are_the_readers_windows(tokenizer):
    questions = [ex.question for ex in EXAMPLES]
    contexts = [ex.context for ex in EXAMPLES]
    features = prepare_train_features(tokenizer, EXAMPLES, WINDOWS)
    inference = tokenize_pairs(tokenizer, questions, contexts, WINDOWS)
    assert len(features) == len(inference) > len(EXAMPLES)
    for feature, sequence in zip(features, inference, strict=True):
        assert feature.example_index == sequence.pair_index
        assert feature.sequence.input_ids.tolist() == sequence.input_ids.tolist()
        assert feature.sequence.char_starts.tolist() == sequence.char_starts.tolist()
        assert (feature.sequence.context_start, feature.sequence.context_end) == (
            sequence.context_start,
            sequence.context_end,
        )
    # ... which are the Hugging Face call's windows (`truncation="only_second"`, max_length, stride)
    encoded = tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=WINDOWS.max_seq_length,
        stride=WINDOWS.stride,
        return_overflowing_tokens=True,
    )
    assert [f.sequence.input_ids.tolist() for f in features] == encoded["input_ids"]


def test_answer_tokens_of_a_span_inside_one_token():
    sequence = SimpleNamespace(
        context_start=1,
        context_end=4,
        char_starts=torch.tensor([0, 0, 6, 12]).numpy(),
        char_ends=torch.tensor([0, 5, 11, 17]).numpy(),
    )
    assert answer_tokens(sequence, 6, 11) == (2, 2)
    assert answer_tokens(sequence, 7, 9) == (2, 2)  # inside a token: that token
    assert answer_tokens(sequence, 0, 17) == (1, 3)
    assert answer_tokens(sequence, 12, 18) == (NULL_POSITION, NULL_POSITION)  # runs past the window


def test_the_loss_ignores_padding_and_the_question(tokenizer):
    short, long = (prepare_train_features(tokenizer, [ex], WINDOWS)[0] for ex in (EXAMPLES[4], EXAMPLES[0]))
    batch = collate_features([short, long], tokenizer.pad_token_id)  # the short feature is padded
    alone = collate_features([short], tokenizer.pad_token_id)
    length = len(short.sequence)
    assert batch["input_ids"].shape[1] > length
    generator = torch.Generator().manual_seed(0)
    start, end = (torch.randn(batch["input_ids"].shape, generator=generator) for _ in range(2))
    losses = qa_loss(start, end, batch)
    assert losses[0].item() == pytest.approx(qa_loss(start[:1, :length], end[:1, :length], alone).item())
    for logits in (start, end):
        logits[0, length:] = 50.0  # padding
        logits[0, 1 : short.sequence.context_start] = 50.0  # the question's tokens (and [SEP])
        logits[0, short.sequence.context_end :] = 50.0  # the last [SEP]
    assert qa_loss(start, end, batch)[0].item() == pytest.approx(losses[0].item())


# --- the loop -----------------------------------------------------------------------------------------------------

TINY = TrainConfig(
    epochs=2, learning_rate=1e-3, batch_size=4, max_seq_length=48, stride=8, warmup_ratio=0.0, progress=False
)


def weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_a_few_steps_lower_the_loss(tiny_bert_model):
    model, tokenizer = load_model(tiny_bert_model)
    config = TrainConfig(epochs=12, learning_rate=3e-3, batch_size=8, max_seq_length=48, stride=8, progress=False)
    result = train(model, tokenizer, small_set(8), config)  # one batch of the whole set: 12 steps
    assert len(result.losses) == 12
    assert result.losses[-1] < 0.6 * result.losses[0]


def test_the_same_seed_gives_identical_weights(tiny_bert_model):
    runs = []
    for seed in (0, 0, 1):
        model, tokenizer = load_model(tiny_bert_model, seed=seed)
        config = TrainConfig(**{**TINY.as_dict(), "seed": seed})
        runs.append((weights(train(model, tokenizer, small_set(10), config).model), seed))
    (first, _), (second, _), (other, _) = runs
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert not all(torch.equal(first[name], other[name]) for name in first)


class StopAfterFirstCheckpoint(TrainHooks):
    """Local hooks that 'kill' the run right after its first checkpoint."""

    def report(self, metrics, name, write_checkpoint):
        super().report(metrics, name, write_checkpoint)
        raise KeyboardInterrupt


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_runs_weights(tiny_bert_model, tmp_path):
    model, tokenizer = load_model(tiny_bert_model)
    whole = train(model, tokenizer, small_set(10), TINY, hooks=TrainHooks(tmp_path / "whole"))
    model, tokenizer = load_model(tiny_bert_model)
    with pytest.raises(KeyboardInterrupt):
        train(model, tokenizer, small_set(10), TINY, hooks=StopAfterFirstCheckpoint(tmp_path / "cut"))
    assert latest_checkpoint(tmp_path / "cut").name == "epoch-1"
    model, tokenizer = load_model(tiny_bert_model, seed=5)  # another head: the checkpoint's weights must win
    resumed = train(model, tokenizer, small_set(10), TINY, hooks=TrainHooks(tmp_path / "cut", resume=True))
    expected, actual = weights(whole.model), weights(resumed.model)
    assert all(torch.equal(expected[name], actual[name]) for name in expected)
    assert resumed.losses == whole.losses
    assert read_checkpoint_info(tmp_path / "cut" / "epoch-2")["losses"] == whole.losses
    assert sorted(path.name for path in (tmp_path / "whole").iterdir()) == ["epoch-1", "epoch-2"]


def test_resuming_with_another_recipe_is_refused(tiny_bert_model, tmp_path):
    model, tokenizer = load_model(tiny_bert_model)
    train(model, tokenizer, small_set(4), TINY, hooks=TrainHooks(tmp_path))
    changed = TrainConfig(**{**TINY.as_dict(), "batch_size": 2})
    with pytest.raises(ValueError, match="batch_size=4 \\(now 2\\)"):
        train(model, tokenizer, small_set(4), changed, hooks=TrainHooks(tmp_path, resume=True))


SAFE_GLOBALS = {
    "collections OrderedDict",
    "torch._utils _rebuild_tensor_v2",
    "torch FloatStorage",
    "torch LongStorage",
    "torch ByteStorage",
    "torch DoubleStorage",
}


def test_checkpoints_hold_no_pickled_code(tiny_bert_model, tmp_path):
    model, tokenizer = load_model(tiny_bert_model)
    train(model, tokenizer, small_set(4), TINY, hooks=TrainHooks(tmp_path))
    folder = tmp_path / "epoch-1"
    assert (folder / "model.safetensors").is_file() and not list(folder.glob("*.bin"))
    for name in (TRAINER_STATE, RNG_STATE.format(rank=0)):
        state = torch.load(folder / name, weights_only=True)  # refuses anything but tensors and plain containers
        assert isinstance(state, dict)
        with zipfile.ZipFile(folder / name) as archive:
            pickled = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
        globals_used = {arg for op, arg, _ in pickletools.genops(pickled) if op.name in ("GLOBAL", "STACK_GLOBAL")}
        assert globals_used <= SAFE_GLOBALS, globals_used - SAFE_GLOBALS


def test_every_epoch_is_scored_with_the_official_metrics(tiny_bert_model):
    model, tokenizer = load_model(tiny_bert_model)
    result = train(model, tokenizer, small_set(8), TINY, eval_examples=small_set(8))
    assert [metrics["epoch"] for metrics in result.epochs] == [1, 2]
    for metrics in result.epochs:
        assert {"eval_exact", "eval_f1", "eval_total", "eval_HasAns_exact", "eval_NoAns_exact"} <= set(metrics)
        assert metrics["eval_total"] == 8
        # a refusal scores 1 on an impossible question; so does an answer that normalises to "" (such as "the")
        assert metrics["eval_NoAns_exact"] >= metrics["eval_refused_unanswerable"]


# --- batches and schedule ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("group_by_length", [False, True])
def test_each_epoch_takes_every_feature_once_in_an_order_fixed_by_seed_and_epoch(group_by_length):
    lengths = [(i * 37) % 50 + 1 for i in range(103)]
    config = TrainConfig(batch_size=8, group_by_length=group_by_length)
    batches = epoch_batches(lengths, config, epoch=0)
    assert sorted(i for batch in batches for i in batch) == list(range(103))
    assert [len(batch) for batch in batches].count(8) == 12
    assert batches == epoch_batches(lengths, config, epoch=0)
    assert batches != epoch_batches(lengths, config, epoch=1)
    # 2 workers share each global batch; a last batch smaller than the worker count is dropped
    assert epoch_batches(lengths[:97], config, 0, world_size=2) == [
        b for b in epoch_batches(lengths[:97], config, 0) if len(b) >= 2
    ]


def test_the_learning_rate_warms_up_then_decays_linearly():
    factor = linear_warmup_decay(warmup_steps=3, total_steps=10)
    assert [factor(step) for step in range(11)] == [0.25, 0.5, 0.75, 1.0, 6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7, 1 / 7, 0.0]


# --- null-score predictions ----------------------------------------------------------------------------------------


class FixedLogits(torch.nn.Module):
    """A stand-in QA model: the null position scores `null`, the span of tokens `first..first + 1` scores `span`."""

    def __init__(self, null: float, span: float, first: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.null, self.span, self.first = null, span, first

    def forward(self, input_ids, attention_mask):
        start = torch.full(input_ids.shape, -5.0)
        end = torch.full(input_ids.shape, -5.0)
        start[:, 0] = end[:, 0] = self.null / 2
        start[:, self.first] = end[:, self.first + 1] = self.span / 2
        return SimpleNamespace(start_logits=start, end_logits=end)


@pytest.mark.parametrize(("null", "span", "refused"), [(3.0, 2.0, True), (1.0, 2.0, False)])
def test_a_question_is_refused_when_the_null_score_beats_every_span(tokenizer, null, span, refused):
    ex = example("q", "What are stored?", SENTENCES[1], "mappings")
    settings = TokenizationSettings(max_seq_length=64, stride=16)
    sequence = tokenize_pairs(tokenizer, [ex.question], [ex.context], settings)[0]
    model = FixedLogits(null, span, first=sequence.context_start + 1)
    predictions = predict_squad(model, tokenizer, [ex], settings)
    assert predictions.refused == {"q": refused}
    first = sequence.context_start + 1
    expected = SENTENCES[1][sequence.char_starts[first] : sequence.char_ends[first + 1]]
    assert predictions.answers == {"q": "" if refused else expected}
    assert predictions.na_probs["q"] == pytest.approx(1 / (1 + math.exp(span - null)))
    metrics = evaluate_model(model, tokenizer, [ex], settings)
    assert metrics["refused_answerable"] == (100.0 if refused else 0.0)
    assert metrics["HasAns_exact"] == (0.0 if refused else float(expected == "mappings") * 100)
