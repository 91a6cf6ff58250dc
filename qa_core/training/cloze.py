"""
Cloze questions from local text, a simple version of Lewis et al. 2019, "Unsupervised Question Answering by Cloze
Translation": take a sentence of a paragraph, choose an answer span in it by a heuristic, and replace the span by a
wh-word; the question is the rest of the sentence. Unanswerable questions pair a question with another paragraph.

- Paragraphs: the blank-line blocks of each document, code (`>>>` sessions, indented blocks) left out, consecutive
  short blocks of one document joined until a paragraph has `min_paragraph_chars`.
- Answers, by kind: code identifiers (`os.path.join`, `namedtuple()`, `max_size`, `OrderedDict`, `*maps*`),
  numbers, capitalised words inside a sentence (`True`, `Unix`), and noun-phrase-like runs (an article and up to
  three words before a function word: `a new subclass`). One kind is drawn per sentence, weighted towards the
  kinds with crisp boundaries.
- The wh-word: "how many" for numbers, "what" for the rest; the question keeps at most `question_window` words on
  each side of it.
- Held-out split by paragraph: a paragraph, with every question asked on it, is either train or held out; held-out
  questions whose sentence also occurs in a train paragraph are dropped, and unanswerable pairings stay within a
  split. Same seed, same questions.

Usage example:
```python
from qa_core.training.cloze import ClozeConfig, generate_cloze, read_paragraphs

split = generate_cloze(read_paragraphs("data/text/python_stdlib_docs.jsonl"), ClozeConfig(seed=0))
print(split.train[0].question, split.train[0].answers)
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qa_core.settings import Settings, at_least, setting, within
from qa_core.squad import GoldAnswer, SquadExample


@dataclass(frozen=True)
class ClozeConfig(Settings):
    """How cloze questions are made."""

    seed: int = setting(0, "fixes the split, the answers and the pairings")
    heldout_share: float = setting(0.2, "share of paragraphs held out (never trained on)")
    unanswerable_share: float = setting(0.33, "share of questions asked on another paragraph than their own")
    same_document_share: float = setting(
        0.5, "share of unanswerable questions paired with a paragraph of the same document"
    )
    min_paragraph_chars: int = setting(
        250, "join a document's consecutive blocks until a paragraph is at least this long"
    )
    max_paragraph_chars: int = setting(
        1000, "but never join blocks beyond this many characters (a longer block stays whole)"
    )
    min_sentence_words: int = setting(5, "shorter sentences ask nothing")
    max_sentence_words: int = setting(60, "longer sentences ask nothing either")
    question_window: int = setting(12, "words kept on each side of the wh-word")
    questions_per_sentence: int = setting(1, "answers drawn per sentence (distinct spans)")

    def problems(self) -> list[str]:
        problems = within("heldout_share", self.heldout_share, 0, 1)
        problems += within("unanswerable_share", self.unanswerable_share, 0, 1)
        problems += within("same_document_share", self.same_document_share, 0, 1)
        problems += at_least("min_paragraph_chars", self.min_paragraph_chars, 0)
        problems += at_least("max_paragraph_chars", self.max_paragraph_chars, max(1, self.min_paragraph_chars))
        problems += at_least("min_sentence_words", self.min_sentence_words, 1)
        problems += at_least("max_sentence_words", self.max_sentence_words, self.min_sentence_words)
        return (
            problems
            + at_least("question_window", self.question_window, 1)
            + at_least("questions_per_sentence", self.questions_per_sentence, 1)
        )


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of a document: its title and text."""

    title: str | None
    text: str


@dataclass
class ClozeSplit:
    """
    :param train: Questions on the train paragraphs, shuffled.
    :param heldout: Questions on the held-out paragraphs, shuffled.
    :param heldout_paragraphs: The held-out paragraphs' texts (no train question's context or source is among them).
    """

    train: list[SquadExample]
    heldout: list[SquadExample]
    heldout_paragraphs: set[str]


@dataclass(frozen=True)
class Cloze:
    """One cloze question on its source paragraph; `answer_start` indexes the paragraph's text."""

    question: str
    answer: str
    answer_start: int
    sentence: str


# The answer heuristics, by kind. Each pattern's group "a" is the answer.
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_ANSWER_PATTERNS = {
    "code": [
        re.compile(rf"\*(?P<a>{_IDENTIFIER}(?:\.{_IDENTIFIER})*)\*"),  # *maps*: an emphasised parameter
        re.compile(rf"(?<![\w.])(?P<a>{_IDENTIFIER}(?:\.{_IDENTIFIER})+(?:\(\))?)(?![\w(])"),  # os.path.join
        re.compile(rf"(?<![\w.])(?P<a>{_IDENTIFIER}\(\))"),  # namedtuple()
        re.compile(r"(?<![\w.*])(?P<a>[a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w(.])"),  # max_size
        re.compile(r"(?<![\w.*])(?P<a>[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)(?![\w(.])"),  # OrderedDict
    ],
    "number": [re.compile(r"(?<![\w.])(?P<a>\d+(?:\.\d+)?)(?![\w.]\w)")],
    "name": [re.compile(r"(?<=[\w,;:]\s)(?P<a>[A-Z][a-zA-Z]+(?:\s[A-Z][a-zA-Z]+)*)(?![\w(.*]\w)")],
    "phrase": [re.compile(r"(?<![\w.])(?P<a>(?:[Tt]he|[Aa]n?)\s+[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2})")],
}
_KIND_WEIGHTS = {"code": 3.0, "number": 2.0, "name": 2.0, "phrase": 1.0}
_FUNCTION_WORDS = frozenset(
    "a an the of to in into for with and or but is are was were be been being that which who whom whose as by on at "
    "from if when while it its this these those than then so not no can could may might must should will would do "
    "does did has have had there their they them such each every any all some other also only".split()
)
_NOT_IDENTIFIERS = frozenset({"e.g", "i.e", "etc"})
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(\"'`])|\n\s*\n|\n(?=\s*[*-] )")
_CODE_LINE = re.compile(r"^(?:>>>|\.\.\.|\s{4,}|\t)")


def read_paragraphs(path: str | Path, config: ClozeConfig | None = None) -> list[Paragraph]:
    """
    The paragraphs of a JSON Lines file of documents (`{"title": ..., "text": ...}` a line), in file order.

    :param path: The file, such as `data/text/python_stdlib_docs.jsonl`.
    :param config: Paragraph sizes; `None` for the defaults.
    :returns: The paragraphs, duplicates (same text) left out.
    """
    config = config or ClozeConfig()
    paragraphs: list[Paragraph] = []
    with Path(path).open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                document = json.loads(line)
                paragraphs += paragraphs_of(document.get("title"), document["text"], config)
    seen: set[str] = set()
    unique = []
    for paragraph in paragraphs:
        if paragraph.text not in seen:
            seen.add(paragraph.text)
            unique.append(paragraph)
    return unique


def paragraphs_of(title: str | None, text: str, config: ClozeConfig) -> list[Paragraph]:
    """A document's prose blocks (code left out), consecutive short ones joined into paragraphs."""
    blocks = [block.strip("\n").rstrip() for block in re.split(r"\n\s*\n", text)]
    blocks = [block for block in blocks if block.strip() and not _is_code(block)]
    paragraphs: list[str] = []
    current = ""
    for block in blocks:
        if current and len(current) + 2 + len(block) > config.max_paragraph_chars:
            paragraphs.append(current)
            current = ""
        current = f"{current}\n\n{block}" if current else block
        if len(current) >= config.min_paragraph_chars:
            paragraphs.append(current)
            current = ""
    if current:
        paragraphs.append(current)
    return [Paragraph(title, paragraph) for paragraph in paragraphs]


def sentences_of(text: str) -> list[tuple[int, int]]:
    """The sentences of a paragraph as `(start, end)` character offsets, surrounding whitespace excluded."""
    spans = []
    start = 0
    for boundary in [*_SENTENCE_END.finditer(text), None]:
        end = len(text) if boundary is None else boundary.start()
        piece = text[start:end]
        stripped = piece.strip()
        if stripped:
            offset = start + len(piece) - len(piece.lstrip())
            spans.append((offset, offset + len(stripped)))
        if boundary is not None:
            start = boundary.end()
    return spans


def answer_candidates(sentence: str) -> dict[str, list[tuple[int, int]]]:
    """
    The answer spans the heuristics find in a sentence, by kind, as `(start, end)` offsets in the sentence.
    """
    found: dict[str, list[tuple[int, int]]] = {}
    for kind, patterns in _ANSWER_PATTERNS.items():
        spans = []
        for pattern in patterns:
            for match in pattern.finditer(sentence):
                start, end = match.span("a")
                if kind == "phrase":
                    end = _phrase_end(sentence, start, end)
                    if end is None:
                        continue
                text = sentence[start:end]
                if kind == "code" and text.rstrip("()").lower() in _NOT_IDENTIFIERS:
                    continue
                if (start, end) not in spans:
                    spans.append((start, end))
        if spans:
            found[kind] = sorted(spans)
    return found


def make_cloze(text: str, sentence: tuple[int, int], answer: tuple[int, int], kind: str, window: int) -> Cloze:
    """
    The cloze question of one answer span of one sentence of a paragraph.

    :param text: The paragraph.
    :param sentence: The sentence's offsets in the paragraph.
    :param answer: The answer's offsets in the paragraph (inside the sentence).
    :param kind: The answer's kind (`number` asks "how many", the others "what").
    :param window: Words kept on each side of the wh-word.
    """
    wh = "how many" if kind == "number" else "what"
    start, end = answer
    while start > sentence[0] and end < sentence[1] and text[start - 1] == text[end] and text[end] in "*`'\"":
        start, end = start - 1, end + 1  # *data* and 'foo' are replaced with their marks
    before, after = text[sentence[0] : start], text[end : sentence[1]].rstrip(".!?:;, \n")
    before_words, after_words = before.split()[-window:], after.split()[:window]
    if not before_words:
        wh = wh[0].upper() + wh[1:]
    question = " ".join(before_words) + (" " if before[-1:].isspace() else "") + wh
    question += (" " if after[:1].isspace() else "") + " ".join(after_words)
    sentence_text = " ".join(text[sentence[0] : sentence[1]].split())
    return Cloze(question.strip() + "?", text[answer[0] : answer[1]], answer[0], sentence_text)


def paragraph_clozes(text: str, config: ClozeConfig, rng: np.random.Generator) -> list[Cloze]:
    """Every usable sentence of a paragraph, with `questions_per_sentence` answers drawn in it."""
    clozes = []
    for start, end in sentences_of(text):
        sentence = text[start:end]
        words = len(sentence.split())
        if not config.min_sentence_words <= words <= config.max_sentence_words or ">>>" in sentence:
            continue
        candidates = answer_candidates(sentence)
        drawn: list[tuple[int, int]] = []
        for _ in range(config.questions_per_sentence):
            kinds = [kind for kind, spans in candidates.items() if [s for s in spans if s not in drawn]]
            if not kinds:
                break
            weights = np.array([_KIND_WEIGHTS[kind] for kind in kinds])
            kind = kinds[rng.choice(len(kinds), p=weights / weights.sum())]
            spans = [span for span in candidates[kind] if span not in drawn]
            span = spans[rng.integers(len(spans))]
            drawn.append(span)
            answer = (start + span[0], start + span[1])
            if len(text[answer[0] : answer[1]].split()) >= words - 1:  # nothing left to ask with
                continue
            clozes.append(make_cloze(text, (start, end), answer, kind, config.question_window))
    return clozes


def generate_cloze(paragraphs: Iterable[Paragraph], config: ClozeConfig | None = None) -> ClozeSplit:
    """
    Cloze questions on paragraphs, answerable and unanswerable, split by paragraph into train and held-out.

    :param paragraphs: The paragraphs (see `read_paragraphs`).
    :param config: The recipe; `None` for the defaults.
    :returns: The train and held-out questions as SQuAD v2 examples, each list shuffled.
    """
    config = config or ClozeConfig()
    config.check()
    rng = np.random.default_rng(config.seed)
    unique = list({paragraph.text: paragraph for paragraph in paragraphs}.values())
    order = rng.permutation(len(unique))
    heldout_count = round(config.heldout_share * len(unique))
    heldout = [unique[index] for index in order[:heldout_count]]
    train = [unique[index] for index in order[heldout_count:]]
    train_sentences = {
        " ".join(paragraph.text[start:end].split())
        for paragraph in train
        for start, end in sentences_of(paragraph.text)
    }
    train_examples = _split_examples("train", train, config, rng, exclude_sentences=set())
    heldout_examples = _split_examples("heldout", heldout, config, rng, exclude_sentences=train_sentences)
    return ClozeSplit(train_examples, heldout_examples, {paragraph.text for paragraph in heldout})


def _split_examples(
    split: str, paragraphs: list[Paragraph], config: ClozeConfig, rng: np.random.Generator, exclude_sentences: set[str]
) -> list[SquadExample]:
    """The questions of one split's paragraphs, each answerable on its paragraph or asked on another of the split."""
    by_title: dict[str | None, list[int]] = {}
    for index, paragraph in enumerate(paragraphs):
        by_title.setdefault(paragraph.title, []).append(index)
    examples = []
    for index, paragraph in enumerate(paragraphs):
        for number, cloze in enumerate(paragraph_clozes(paragraph.text, config, rng)):
            if cloze.sentence in exclude_sentences:
                continue
            qid = f"cloze-{split}-{index:05d}-{number:02d}"
            other = None
            if len(paragraphs) > 1 and rng.random() < config.unanswerable_share:
                other = _other_paragraph(index, cloze, paragraphs, by_title, config, rng)
            if other is None:
                answer = GoldAnswer(text=cloze.answer, answer_start=cloze.answer_start)
                examples.append(SquadExample(qid, paragraph.title, cloze.question, paragraph.text, [answer]))
            else:
                examples.append(
                    SquadExample(f"{qid}-na", other.title, cloze.question, other.text, [], is_impossible=True)
                )
    return [examples[index] for index in rng.permutation(len(examples))]


def _other_paragraph(
    index: int,
    cloze: Cloze,
    paragraphs: list[Paragraph],
    by_title: dict[str | None, list[int]],
    config: ClozeConfig,
    rng: np.random.Generator,
) -> Paragraph | None:
    """A paragraph of the split other than `index` that holds neither the answer nor the sentence; `None` if none."""
    same = [other for other in by_title[paragraphs[index].title] if other != index]
    pools = [same] if same and rng.random() < config.same_document_share else []
    pools.append(range(len(paragraphs)))
    answer = cloze.answer.lower()
    for pool in pools:
        for _ in range(8):
            other = int(pool[rng.integers(len(pool))])
            text = paragraphs[other].text
            if other != index and answer not in text.lower() and cloze.sentence not in " ".join(text.split()):
                return paragraphs[other]
    return None


def _phrase_end(sentence: str, start: int, end: int) -> int | None:
    """The end of a noun-phrase-like run: the article and its words up to (not including) a function word."""
    words = list(re.finditer(r"\S+", sentence[start:end]))
    kept = words[:1]
    for word in words[1:]:
        if word.group().lower() in _FUNCTION_WORDS:
            break
        kept.append(word)
    if len(kept) < 2:
        return None
    return start + kept[-1].end()


def _is_code(block: str) -> bool:
    lines = [line for line in block.splitlines() if line.strip()]
    return sum(bool(_CODE_LINE.match(line)) for line in lines) * 2 > len(lines)


__all__ = [
    "Cloze",
    "ClozeConfig",
    "ClozeSplit",
    "Paragraph",
    "answer_candidates",
    "generate_cloze",
    "make_cloze",
    "paragraph_clozes",
    "paragraphs_of",
    "read_paragraphs",
    "sentences_of",
]
