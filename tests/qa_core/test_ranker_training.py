"""Fine-tuning a cross-encoder (`qa_core.training.ranking`) and the `minilm-ranker` target, on tiny data."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from qa_core.local_models import TEXT_FILE
from qa_core.local_models.__main__ import build_parser
from qa_core.ranker import CrossEncoderRanker
from qa_core.squad import GoldAnswer, SquadExample
from qa_core.training.loop import TrainConfig
from qa_core.training.minilm_ranker import RANKING_LENGTH, RECIPE, build_minilm_ranker
from qa_core.training.cloze import generate_cloze, read_paragraphs
from qa_core.training.minilm_squad import CLOZE as CLOZE_CONFIG
from qa_core.training.ranking import RankingPair, load_cross_encoder, ranking_pairs, train_ranker, word_windows

JSON = "The json module encodes objects as text: json.dumps serialises an object to a string."
LOADS = "The json module decodes text with json.loads, the inverse of dumps, into an object."
PICKLE = "The pickle module serialises objects to bytes; loading untrusted pickles is not secure."
CSV = "The csv module reads and writes comma separated values, one row at a time."


def example(qid: str, question: str, context: str, answer: str | None) -> SquadExample:
    if answer is None:
        return SquadExample(qid, None, question, context, [], is_impossible=True)
    return SquadExample(qid, None, question, context, [GoldAnswer(answer, context.index(answer))])


def test_pairs_are_each_question_with_its_passage_and_the_best_bm25_passages_without_its_answer() -> None:
    examples = [
        example("a", "What does the json module use to serialise an object to a string?", JSON, "json.dumps"),
        example("b", "What is not secure?", CSV, None),  # asked on another paragraph: a negative
        example("c", "What does the json module call the inverse of dumps?", LOADS, "json.loads"),
        example("d", "What does the pickle module serialise objects to?", PICKLE, "bytes"),
    ]
    pairs = ranking_pairs(examples, hard_negatives=1)
    assert pairs == [
        RankingPair(examples[0].question, JSON, 1.0),
        RankingPair(examples[0].question, LOADS, 0.0),  # json module ... text ... object: BM25's best other one
        RankingPair(examples[1].question, CSV, 0.0),
        RankingPair(examples[2].question, LOADS, 1.0),
        RankingPair(examples[2].question, JSON, 0.0),
        RankingPair(examples[3].question, PICKLE, 1.0),
        RankingPair(examples[3].question, JSON, 0.0),
    ]
    # A passage holding the answer is no negative: "dumps" is in both json paragraphs, so the next best is taken.
    dumps = example("e", "What is the inverse of json.loads?", JSON, "dumps")
    assert [pair.passage for pair in ranking_pairs([dumps, *examples[1:]], hard_negatives=1)[:2]] == [JSON, PICKLE]
    assert len(ranking_pairs(examples, hard_negatives=0)) == 4


def test_windows_are_cut_from_the_texts_and_never_a_negative_of_a_question_on_a_text_they_overlap() -> None:
    texts = [JSON, LOADS, PICKLE, CSV]
    words = [(word, index) for index, text in enumerate(texts) for word in text.split()]
    windows = word_windows(texts, 40, seed=0, lengths=(3, 6))
    assert windows == word_windows(texts, 40, seed=0, lengths=(3, 6)) != word_windows(texts, 40, seed=1, lengths=(3, 6))
    for window in windows:  # consecutive words of the texts joined, and the texts they come from
        cut = window.text.split()
        places = [words[start : start + len(cut)] for start in range(len(words) - len(cut) + 1)]
        assert 3 <= len(cut) <= 6
        assert any([w for w, _ in place] == cut and {i for _, i in place} == window.sources for place in places)
    assert len({len(window.sources) for window in windows}) == 2  # some cross a boundary
    assert word_windows(texts, 1, seed=0, lengths=(100, 200))[0].text == " ".join(texts)  # longer than them all
    assert word_windows(["", " "], 5, seed=0) == []  # no words: no windows
    split = generate_cloze(read_paragraphs(TEXT_FILE, CLOZE_CONFIG), CLOZE_CONFIG)
    examples = split.train[:150]
    contexts = list(dict.fromkeys(example.context for example in examples))
    sources = {window.text: window.sources for window in word_windows(contexts, 400, seed=0)}
    pairs = ranking_pairs(examples, hard_negatives=3, windows=400, seed=0)
    negatives = [(pair, example) for pair in pairs for example in examples
                 if pair.label == 0.0 and pair.question == example.question and example.answers]  # fmt: skip
    from_windows = [(pair, example) for pair, example in negatives if pair.passage in sources]
    assert len(from_windows) > len(negatives) / 3  # windows are among BM25's best negatives
    for pair, example in from_windows:
        assert contexts.index(example.context) not in sources[pair.passage]
        assert not any(answer.text.lower() in pair.passage.lower() for answer in example.answers)
    assert pairs[: len(ranking_pairs(examples, hard_negatives=3))] != ranking_pairs(examples, hard_negatives=3)


def test_train_ranker_lowers_the_loss_of_its_pairs(tiny_bert_model: Path) -> None:
    model, tokenizer = load_cross_encoder(tiny_bert_model, seed=0)
    pairs = [RankingPair("json serialise", JSON, 1.0), RankingPair("json serialise", CSV, 0.0),
             RankingPair("pickle secure", PICKLE, 1.0), RankingPair("pickle secure", LOADS, 0.0)]  # fmt: skip
    config = TrainConfig(epochs=20, batch_size=4, learning_rate=1e-2, warmup_ratio=0.0, max_seq_length=32, stride=8,
                         progress=False)  # fmt: skip
    result = train_ranker(model, tokenizer, pairs, config, device="cpu")
    assert len(result.losses) == 20
    assert max(result.losses[-3:]) < result.losses[0] / 3
    assert len(train_ranker(model, tokenizer, pairs, replace(config, max_steps=5), device="cpu").losses) == 5
    with pytest.raises(ValueError, match="No ranking pairs"):
        train_ranker(model, tokenizer, [], config)


def test_minilm_ranker_target_on_tiny_text(tmp_path: Path) -> None:
    """The target end to end on 8 documents and 2 steps (pairs cut at 64 tokens): a CrossEncoder folder that both
    rankers load with the ranking length, its training record and README."""
    text = tmp_path / "text.jsonl"
    text.write_text("".join(TEXT_FILE.read_text(encoding="utf-8").splitlines(keepends=True)[:8]), encoding="utf-8")
    recipe = replace(RECIPE, max_steps=2, batch_size=4, max_seq_length=64, stride=16, progress=False)
    folder = build_minilm_ranker(tmp_path / "ranker", seed=1, text_file=text, recipe=recipe)
    summary = json.loads((folder / "training.json").read_text())
    assert len(summary["losses"]) == 2 and summary["recipe"]["seed"] == 1
    heldout = summary["heldout"]
    assert heldout["questions"] > 0 and 0 <= heldout["reranked_recall@1"] <= heldout["bm25_recall@5"] <= 1
    assert "recall@1: BM25" in (folder / "README.md").read_text()
    ranker = CrossEncoderRanker(model=folder, device="cpu")
    ranker.warm_up()
    assert ranker.config.max_length == RANKING_LENGTH == 512
    from sentence_transformers import CrossEncoder

    reference = CrossEncoder(str(folder), device="cpu")
    pair = ("What does json.dumps return?", JSON * 40)  # longer than 512 tokens: truncated alike
    raw = reference.predict([pair], activation_fn=torch.nn.Identity())[0]
    assert ranker.logits([pair])[0] == pytest.approx(raw, abs=1e-5)


def test_the_command_line_offers_both_cross_encoders() -> None:
    for kind in ("minilm-cross-encoder", "minilm-ranker"):
        assert build_parser().parse_args([kind, "out"]).kind == kind
