"""
Fine-tuning a cross-encoder to rank passages for questions, engine-free: (question, passage, label) pairs from
SQuAD-style examples (`ranking_pairs`: each answerable question's own passage, the passages that do not answer it),
and the loop (`train_ranker`): binary cross-entropy on the model's one logit, with the reader's recipe
(`qa_core.training.loop.TrainConfig`: AdamW, linear warmup and decay, length-grouped batches, clipping).

Usage example:
```python
from qa_core.training import TrainConfig
from qa_core.training.ranking import load_cross_encoder, ranking_pairs, train_ranker

model, tokenizer = load_cross_encoder("path/to/encoder", seed=0)
pairs = ranking_pairs(examples, hard_negatives=1)
result = train_ranker(model, tokenizer, pairs, TrainConfig(epochs=1, max_seq_length=256))
result.model.save_pretrained("ranker")
```
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm

from qa_core.document import Document
from qa_core.hardware import resolve_precision
from qa_core.inference import pad_rows, resolve_device
from qa_core.retrieval import BM25Retriever
from qa_core.training.loop import TrainConfig, TrainResult, epoch_batches, linear_warmup_decay, parameter_groups

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from qa_core.squad import SquadExample


WINDOW_WORDS = (20, 200)  # the shortest and longest word window `word_windows` cuts


@dataclass(frozen=True)
class Window:
    """A passage negatives are drawn from, and the indices of the contexts whose words it holds."""

    text: str
    sources: frozenset[int]


@dataclass(frozen=True)
class RankingPair:
    """A question, a passage, and whether the passage answers it (1.0) or not (0.0)."""

    question: str
    passage: str
    label: float


def word_windows(texts: Seq[str], count: int, seed: int, lengths: tuple[int, int] = WINDOW_WORDS) -> list[Window]:
    """
    `count` windows of consecutive words cut at seeded random places from the texts joined in order, each between
    `lengths` words long, as a corpus split into passages of words has them (starting and ending mid-sentence,
    across the texts' boundaries).

    :returns: Each window's text and the indices of the texts it takes words from; none when the texts hold no
        words.
    """
    words: list[str] = []
    sources: list[int] = []
    for index, text in enumerate(texts):
        split = text.split()
        words += split
        sources += [index] * len(split)
    if not words:
        return []
    rng = random.Random(seed)
    longest = min(lengths[1], len(words))
    windows = []
    for _ in range(count):
        length = rng.randint(min(lengths[0], longest), longest)
        start = rng.randint(0, len(words) - length)
        windows.append(Window(" ".join(words[start : start + length]), frozenset(sources[start : start + length])))
    return windows


def ranking_pairs(
    examples: Seq[SquadExample], hard_negatives: int = 1, windows: int = 0, seed: int = 0
) -> list[RankingPair]:
    """
    Training pairs from SQuAD-style examples: an answerable question with its own context (label 1) and with the
    `hard_negatives` passages that BM25 ranks best for it among those that neither are nor overlap its context and
    do not contain its answer (label 0); an unanswerable question with its context (label 0).

    :param examples: The examples; their distinct contexts are the passages negatives are drawn from.
    :param hard_negatives: BM25-hard negatives per answerable question.
    :param windows: Word windows of the contexts (`word_windows`) added to the passages negatives are drawn from,
        so that the ranker also learns to refuse passages cut mid-sentence.
    :param seed: Where the windows are cut.
    :returns: The pairs, in example order, each question's positive first.
    """
    contexts = list(dict.fromkeys(example.context for example in examples))
    passages = [Window(text, frozenset((index,))) for index, text in enumerate(contexts)]
    passages += word_windows(contexts, windows, seed)
    answerable = [example for example in examples if example.answers]
    found: list[list[Window]] = [[] for _ in answerable]
    if hard_negatives and answerable and len(contexts) > 1:
        retriever = BM25Retriever(documents=[Document(content=p.text, id=str(i)) for i, p in enumerate(passages)])
        retriever.warm_up()
        depth = min(len(passages), hard_negatives + 30)  # room for those that hold the answer or overlap the context
        hits = retriever.run_batch([example.question for example in answerable], top_k=depth)["documents"]
        found = [[passages[int(doc.id)] for doc in row] for row in hits]
    context_index = {text: index for index, text in enumerate(contexts)}
    pairs: list[RankingPair] = []
    negatives = iter(found)
    for example in examples:
        if not example.answers:
            pairs.append(RankingPair(example.question, example.context, 0.0))
            continue
        pairs.append(RankingPair(example.question, example.context, 1.0))
        answers = [answer.text.lower() for answer in example.answers]
        own = context_index[example.context]
        others = [passage.text for passage in next(negatives) if own not in passage.sources
                  and not any(answer in passage.text.lower() for answer in answers)]  # fmt: skip
        pairs += [RankingPair(example.question, text, 0.0) for text in others[:hard_negatives]]
    return pairs


def load_cross_encoder(path: str | Path, seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """
    A one-label sequence-classification model and its tokenizer from a local folder (an encoder, or a
    cross-encoder to train further); a head the folder lacks is drawn after `torch.manual_seed(seed)`.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1)
    return model, AutoTokenizer.from_pretrained(str(path))


def train_ranker(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Seq[RankingPair],
    config: TrainConfig,
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> TrainResult:
    """
    Fine-tunes a one-label cross-encoder on (question, passage, label) pairs, in one process: each optimizer step
    takes `config.batch_size` pairs (tokenized as the ranker reads them: `longest_first` truncation at
    `config.max_seq_length`) and minimises their mean binary cross-entropy with logits.

    :param model: A sequence-classification model with one label.
    :param tokenizer: Its fast tokenizer.
    :param pairs: The training pairs.
    :param config: The recipe (`epochs`, `learning_rate`, `batch_size`, `weight_decay`, `warmup_ratio`,
        `max_grad_norm`, `max_seq_length`, `seed`, `max_steps`, `group_by_length`, `progress`).
    :param device: Where to train; `None`: the first GPU, else the CPU.
    :param precision: `fp32`; `bf16`: the forward and backward passes under bfloat16 autocast (the weights and the
        optimizer in fp32); `auto`: bf16 where the device multiplies it natively (`qa_core.hardware.fast_bf16`).
    :returns: The trained model (in train mode) and its loss per step.
    :raises ValueError: For an invalid config or no pairs.
    """
    config.check()
    if not pairs:
        raise ValueError("No ranking pairs to train on.")
    encoded = tokenizer([pair.question for pair in pairs], [pair.passage for pair in pairs],
                        truncation="longest_first", max_length=config.max_seq_length)  # fmt: skip
    input_ids, token_types = encoded["input_ids"], encoded.get("token_type_ids")
    labels = torch.tensor([pair.label for pair in pairs])
    lengths = [len(ids) for ids in input_ids]
    steps_per_epoch = len(epoch_batches(lengths, config, 0))
    total_steps = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    device = resolve_device(device)
    autocast = resolve_precision(precision, device) == "bf16"
    torch.manual_seed(config.seed)
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, linear_warmup_decay(math.ceil(config.warmup_ratio * total_steps), total_steps)
    )
    loss_of = torch.nn.BCEWithLogitsLoss()
    losses: list[float] = []
    progress = tqdm(total=total_steps, desc="train ranker", disable=not config.progress)
    for epoch in range(config.epochs):
        for batch in epoch_batches(lengths, config, epoch)[: total_steps - len(losses)]:
            ids, mask = pad_rows([input_ids[index] for index in batch], tokenizer.pad_token_id)
            inputs = {"input_ids": ids, "attention_mask": mask}
            if token_types is not None:
                inputs["token_type_ids"] = pad_rows([token_types[index] for index in batch], 0)[0]
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(**{name: tensor.to(device) for name, tensor in inputs.items()}).logits
            loss = loss_of(logits.float().squeeze(-1), labels[batch].to(device))
            loss.backward()
            if config.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            progress.update(1)
            progress.set_postfix(loss=f"{losses[-1]:.4f}")
    progress.close()
    return TrainResult(model=model, losses=losses, epochs=[])


__all__ = ["RankingPair", "Window", "load_cross_encoder", "ranking_pairs", "train_ranker", "word_windows"]
