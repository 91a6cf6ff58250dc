"""
SQuAD data as plain records: read the official JSON layout (v1.1 / v2.0) or Hugging Face's `squad` / `squad_v2`
layout (Parquet, a folder of Parquet files, or JSON Lines), check every gold span against its context,
and write the official JSON layout back.
"""

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.parquet as pq

VERSIONS = ("1.1", "2.0")

# How many problems an error message lists before it only counts the rest.
_LISTED_PROBLEMS = 20


@dataclass
class GoldAnswer:
    """A gold answer span: `context[answer_start : answer_start + len(text)] == text`."""

    text: str
    answer_start: int


@dataclass
class SquadExample:
    """
    One SQuAD question with its context and gold answers.

    :param id: The dataset's own question id.
    :param title: The article's title, `None` when the data has none.
    :param question: The question.
    :param context: The paragraph the answer is to be found in.
    :param answers: Gold answers; empty for an impossible question and for unlabelled data.
    :param is_impossible: True for a SQuAD v2.0 question without an answer in its context.
    :param plausible_answers: SQuAD v2.0's wrong-but-plausible spans of an impossible question (official JSON only).
    """

    id: str
    title: str | None
    question: str
    context: str
    answers: list[GoldAnswer] = field(default_factory=list)
    is_impossible: bool = False
    plausible_answers: list[GoldAnswer] = field(default_factory=list)


class MisalignedAnswer(NamedTuple):
    """A gold (or plausible) answer whose `answer_start` does not point at its `text` in the context."""

    id: str
    text: str
    answer_start: int


@dataclass
class SquadDataset:
    """
    SQuAD questions read by `read_squad`.

    Usage example:
    ```python
    dataset = read_squad("dev-v2.0.json")
    assert dataset.version == "2.0" and dataset.has_gold
    ```

    :param examples: The questions, in file order.
    :param version: `"1.1"` or `"2.0"` (see `read_squad` for how it is decided).
    :param has_gold: False for unlabelled data (no `answers` field at all).
    :param misaligned: Gold answers left out because they do not match their context
        (only with `read_squad(..., allow_misaligned_gold=True)`).
    :param unreviewed: From a Label Studio export: the question ids of tasks left out for want of a review.
    """

    examples: list[SquadExample]
    version: str
    has_gold: bool
    misaligned: list[MisalignedAnswer] = field(default_factory=list)
    unreviewed: list[str] = field(default_factory=list)


class SquadFormatError(ValueError):
    """
    Data that cannot be read as SQuAD questions; `problems` lists every problem found, each naming its question id,
    row or task. The message is one line: the file, the count and the first problems.
    """

    def __init__(self, path: Path, problems: list[str], what: str = "the SQuAD data"):
        self.path = path
        self.problems = problems
        listed = "; ".join(problems[:_LISTED_PROBLEMS])
        more = f" ... and {len(problems) - _LISTED_PROBLEMS} more" if len(problems) > _LISTED_PROBLEMS else ""
        super().__init__(f"{path}: {len(problems)} problem(s) in {what}: {listed}{more}")


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, for error messages that name a bad value without echoing the file."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


@dataclass
class _RawQuestion:
    """A question as found in the file, not yet checked. `answers` is `None` when the field is absent."""

    where: str  # location in the file, for error messages
    id: Any
    title: Any
    question: Any
    context: Any
    answers: list[tuple[Any, Any]] | None  # (text, answer_start) pairs
    is_impossible: Any = None  # None when the field is absent
    plausible_answers: list[tuple[Any, Any]] = field(default_factory=list)
    error: str | None = None  # a problem found while reading (a row that is not an object, malformed answers)


def read_squad(path: str | Path, allow_misaligned_gold: bool = False) -> SquadDataset:
    """
    Reads SQuAD questions from the official JSON layout or from Hugging Face's `squad` / `squad_v2` layout.

    Layouts, by file name (a Label Studio export, a `.json` list, is `qa_core.question_files.read_questions`'s):
    - `.json`: the official layout (`{"version": ..., "data": [{"title", "paragraphs": [{"context", "qas"}]}]}`),
      or Hugging Face rows in its `data` list (`{"version": ..., "data": [{"id", "question", "context", ...}]}`),
      or JSON Lines of Hugging Face rows when the file is not one JSON object with a `data` field.
    - `.jsonl`: JSON Lines, one Hugging Face row (`id, title, context, question, answers{text[], answer_start[]}`)
      a line.
    - `.parquet`, or a folder of `.parquet` files (read in name order): Hugging Face rows.

    The version: `"2.0"` when any question has an `is_impossible` field; otherwise the official JSON's `version`
    field when it names 1.x (`"1.1"`) or 2.x (`"2.0"`); otherwise (Hugging Face rows, or no usable `version`)
    `"2.0"` when any question has an empty answer list, else `"1.1"`. Unlabelled data (no `answers` field
    anywhere) has `has_gold=False` (and, read from Hugging Face rows, version `"1.1"` by the same rule).

    A gold answer whose `answer_start` does not index its `text` in the context is a problem. So are: missing or
    non-string ids, questions and contexts; empty (blank) questions and contexts; duplicate ids; `answers` present
    for some questions only; an impossible question with answers, or a possible one without; an empty answer list
    in v1.1 data. All problems are gathered and raised together. Questions are named by id and location:
    `data[a].paragraphs[p].qas[q]` in the official layout, `data[i]` for rows in a `data` list, `line N` (from 1)
    in JSON Lines, `row N` (from 0, after the file name in a folder) in Parquet.

    :param path: The file or folder.
    :param allow_misaligned_gold: Leave misaligned answers out instead of raising, and list them in
        `SquadDataset.misaligned`. A question all of whose gold answers are misaligned is left out with them.
    :returns: The questions, their version and whether they carry gold answers.
    :raises SquadFormatError: Listing every problem found, each naming its question id (or row) and the file.
    :raises FileNotFoundError: When `path` does not exist.
    """
    path = Path(path)
    raw, declared_version = _read_raw(path)
    return _build_dataset(path, raw, declared_version, allow_misaligned_gold)


def squad_from_json(path: Path, text: str, document: Any, allow_misaligned_gold: bool = False) -> SquadDataset:
    """
    `read_squad` of a `.json` file already read, for a caller that looked at its JSON first.

    :param path: The file, for error messages.
    :param text: Its text.
    :param document: The text parsed (`json_or_none`): `None` when it is not one JSON value (JSON Lines).
    :param allow_misaligned_gold: As `read_squad`'s.
    """
    raw, declared_version = _read_json(path, text, document)
    return _build_dataset(path, raw, declared_version, allow_misaligned_gold)


def _read_raw(path: Path) -> tuple[list[_RawQuestion], Any]:
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise SquadFormatError(path, ["the folder holds no .parquet files"])
        return [question for file in files for question in _parquet_questions(file, where=file.name)], None
    if not path.exists():
        raise FileNotFoundError(f"No SQuAD data at {path}.")
    if path.suffix == ".parquet":
        return list(_parquet_questions(path, where="")), None
    if path.suffix not in (".json", ".jsonl"):
        raise SquadFormatError(path, [f"unknown file type {path.suffix!r}: expected .json, .jsonl or .parquet"])
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return _read_json(path, text, json_or_none(text))
    return [_hf_question(row, f"line {number}") for number, row in _json_lines(path, text)], None


def _read_json(path: Path, text: str, document: Any) -> tuple[list[_RawQuestion], Any]:
    """A `.json` file's questions: `document` is its text parsed, `None` when it is not one JSON value."""
    if isinstance(document, list):
        problem = "a JSON list, not SQuAD's layout (read a Label Studio export with qa_core.question_files)"
        raise SquadFormatError(path, [problem])
    if isinstance(document, dict) and "data" in document:
        if _hugging_face_rows(document["data"]):
            rows = [_hf_question(row, f"data[{i}]") for i, row in enumerate(document["data"])]
            return rows, document.get("version")
        return _official_questions(path, document), document.get("version")
    if document is not None and len(text.strip().splitlines()) > 1:
        raise SquadFormatError(path, ["a JSON document without the official layout's 'data' list of articles"])
    return [_hf_question(row, f"line {number}") for number, row in _json_lines(path, text)], None


def _hugging_face_rows(data: Any) -> bool:
    """Whether a JSON document's `data` holds Hugging Face rows (as `datasets.load_dataset("json", field="data")`
    reads them, e.g. transformers' SQuAD test sample) rather than the official layout's articles."""
    if not (isinstance(data, list) and data and isinstance(data[0], dict)):
        return False
    return "paragraphs" not in data[0] and ("question" in data[0] or "context" in data[0])


def json_or_none(text: str) -> Any:
    """`text` parsed as one JSON value, or `None` when it is not one (JSON Lines, or not JSON)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _json_lines(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise SquadFormatError(path, [f"line {number} is not JSON: {error}"]) from error


def _parquet_questions(path: Path, where: str) -> Iterator[_RawQuestion]:
    table = pq.read_table(path)
    missing = sorted(_HF_COLUMNS - set(table.column_names))
    if missing:
        raise SquadFormatError(path, [f"missing column(s) {missing}; the columns are {table.column_names}"])
    prefix = f"{where} " if where else ""
    for number, row in enumerate(table.to_pylist()):
        yield _hf_question(row, f"{prefix}row {number}")


_HF_COLUMNS = {"id", "question", "context"}


def _hf_question(row: Any, where: str) -> _RawQuestion:
    if not isinstance(row, dict):
        return _RawQuestion(where, None, None, None, None, None, error=f"not an object: {shown(row)}")
    answers, pairs, error = row.get("answers"), None, None
    if answers is not None:
        texts = answers.get("text") if isinstance(answers, dict) else None
        starts = answers.get("answer_start") if isinstance(answers, dict) else None
        if isinstance(texts, list) and isinstance(starts, list) and len(texts) == len(starts):
            pairs = list(zip(texts, starts, strict=True))
        else:
            pairs = []
            error = f"'answers' must be {{'text': [...], 'answer_start': [...]}} of equal lengths, not {shown(answers)}"
    return _RawQuestion(
        where, row.get("id"), row.get("title"), row.get("question"), row.get("context"), pairs, error=error
    )


def _official_questions(path: Path, document: dict[str, Any]) -> list[_RawQuestion]:
    questions = []
    articles = document["data"]
    if not isinstance(articles, list):
        raise SquadFormatError(path, ["'data' must be a list of articles"])
    for a, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise SquadFormatError(path, [f"data[{a}] has no 'paragraphs' list"])
        for p, paragraph in enumerate(paragraphs):
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(qas, list):
                raise SquadFormatError(path, [f"data[{a}].paragraphs[{p}] has no 'qas' list"])
            for q, qa in enumerate(qas):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                if not isinstance(qa, dict):
                    questions.append(
                        _RawQuestion(where, None, None, None, None, None, error=f"not an object: {shown(qa)}")
                    )
                    continue
                answers, plausible = qa.get("answers", _ABSENT), qa.get("plausible_answers", [])
                malformed = [
                    name
                    for name, value in (("answers", answers), ("plausible_answers", plausible))
                    if value is not _ABSENT and not isinstance(value, list)
                ]
                questions.append(
                    _RawQuestion(
                        where=where,
                        id=qa.get("id"),
                        title=article.get("title"),
                        question=qa.get("question"),
                        context=paragraph.get("context"),
                        answers=None if answers is _ABSENT else _official_answers(answers),
                        is_impossible=qa.get("is_impossible"),
                        plausible_answers=_official_answers(plausible),
                        error=f"{' and '.join(malformed)} must be a list of answers" if malformed else None,
                    )
                )
    return questions


_ABSENT = object()  # marks a field the file does not have


def _official_answers(answers: Any) -> list[tuple[Any, Any]]:
    if not isinstance(answers, list):
        return []  # reported through _RawQuestion.error
    return [(a.get("text"), a.get("answer_start")) if isinstance(a, dict) else (a, None) for a in answers]


def _resolve_version(declared: Any, raw: list[_RawQuestion]) -> str:
    if any(question.is_impossible is not None for question in raw):
        return "2.0"
    match = re.fullmatch(r"v?([12])(\.\d+)*", str(declared).strip()) if declared is not None else None
    if match:
        return "1.1" if match.group(1) == "1" else "2.0"
    return "2.0" if any(question.answers == [] for question in raw) else "1.1"


def _build_dataset(
    path: Path, raw: list[_RawQuestion], declared_version: Any, allow_misaligned_gold: bool
) -> SquadDataset:
    version = _resolve_version(declared_version, raw)
    labelled = [question.answers is not None for question in raw]
    has_gold = any(labelled)
    problems: list[str] = []
    if has_gold and not all(labelled):
        unlabelled = [_label(question) for question, has in zip(raw, labelled, strict=True) if not has]
        listed = "; ".join(unlabelled[:5]) + ("; ..." if len(unlabelled) > 5 else "")
        problems.append(f"{len(unlabelled)} question(s) have no 'answers' field while others do: {listed}")
    misaligned: list[MisalignedAnswer] = []
    examples: list[SquadExample] = []
    first_seen: dict[str, str] = {}
    for question in raw:
        example = _check_question(question, version, problems, misaligned)
        if example is None:
            continue
        if example.id in first_seen:
            problems.append(f"duplicate id {example.id!r} at {question.where} (first at {first_seen[example.id]})")
            continue
        first_seen[example.id] = question.where
        if question.answers and not example.answers:
            continue  # every gold answer misaligned: left out (strict reading raises below)
        examples.append(example)
    if not allow_misaligned_gold:
        problems.extend(
            f"question {m.id!r}: answer {m.text!r} at answer_start {m.answer_start} does not match its context"
            for m in misaligned
        )
    if problems:
        raise SquadFormatError(path, problems)
    return SquadDataset(examples=examples, version=version, has_gold=has_gold, misaligned=misaligned)


def _label(question: _RawQuestion) -> str:
    return f"question {question.id!r} ({question.where})" if isinstance(question.id, str) else question.where


def _check_question(
    question: _RawQuestion, version: str, problems: list[str], misaligned: list[MisalignedAnswer]
) -> SquadExample | None:
    """The checked example, or `None` after adding its problems (misaligned answers are only collected)."""
    if question.error is not None:
        problems.append(f"{_label(question)}: {question.error}")
        return None
    found = len(problems)
    if question.id is None:
        problems.append(f"{question.where}: missing 'id'")
    elif not isinstance(question.id, str) or not question.id:
        problems.append(f"{question.where}: 'id' must be a non-empty string, not {shown(question.id)}")
    for name in ("question", "context"):
        value = getattr(question, name)
        if value is None:
            problems.append(f"{_label(question)}: missing '{name}'")
        elif not isinstance(value, str):
            problems.append(f"{_label(question)}: '{name}' must be a string, not {shown(value)}")
        elif not value.strip():
            problems.append(f"{_label(question)}: empty {name}")
    if question.title is not None and not isinstance(question.title, str):
        problems.append(f"{_label(question)}: 'title' must be a string, not {shown(question.title)}")
    if len(problems) > found:
        return None
    answers = _check_answers(question, question.answers or [], problems, misaligned)
    plausible = _check_answers(question, question.plausible_answers, problems, misaligned)
    is_impossible = question.is_impossible
    if is_impossible is None:
        is_impossible = version == "2.0" and question.answers == []
    if not isinstance(is_impossible, bool):
        problems.append(f"{_label(question)}: 'is_impossible' must be true or false, not {shown(is_impossible)}")
    elif is_impossible and question.answers:
        problems.append(f"{_label(question)}: 'is_impossible' is true but it has gold answers")
    elif not is_impossible and question.answers == []:
        if version == "1.1":
            problems.append(f"{_label(question)}: no gold answers, which SQuAD v1.1 does not allow")
        else:
            problems.append(f"{_label(question)}: 'is_impossible' is false but it has no gold answers")
    if len(problems) > found:
        return None
    return SquadExample(
        id=question.id,
        title=question.title,
        question=question.question,
        context=question.context,
        answers=answers,
        is_impossible=is_impossible,
        plausible_answers=plausible,
    )


def _check_answers(
    question: _RawQuestion, pairs: list[tuple[Any, Any]], problems: list[str], misaligned: list[MisalignedAnswer]
) -> list[GoldAnswer]:
    """The well-formed, aligned answers; malformed ones go to `problems`, misaligned ones to `misaligned`."""
    kept = []
    for text, start in pairs:
        if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
            problems.append(
                f"{_label(question)}: an answer needs a string 'text' and an integer 'answer_start', "
                f"not {shown(text)} and {shown(start)}"
            )
        elif start < 0 or question.context[start : start + len(text)] != text:
            misaligned.append(MisalignedAnswer(question.id, text, start))
        else:
            kept.append(GoldAnswer(text=text, answer_start=start))
    return kept


def write_squad_json(data: SquadDataset | Sequence[SquadExample], path: str | Path, version: str | None = None) -> None:
    """
    Writes questions in the official SQuAD JSON layout (`squad_json`), so that `read_squad` gives back equal
    examples.

    :param data: A dataset, or examples (written as labelled data).
    :param path: The JSON file to write.
    :param version: `"1.1"` or `"2.0"`; defaults to the dataset's version and is required for a list of examples.
    :raises ValueError: See `squad_json`.
    """
    document = squad_json(data, version)
    Path(path).write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")


def squad_json(data: SquadDataset | Sequence[SquadExample], version: str | None = None) -> dict[str, Any]:
    """
    Questions as the official SQuAD JSON document (`{"version": ..., "data": [...]}`), which `write_squad_json`
    writes.

    Consecutive questions with the same title form one article, and consecutive questions of an article with the
    same context one paragraph, so the questions keep their order. v2.0 files get `is_impossible` on every
    question and `plausible_answers` where there are some; a `None` title is left out; unlabelled data
    (`has_gold=False`) is written without `answers`.

    :param data: A dataset, or examples (written as labelled data).
    :param version: `"1.1"` or `"2.0"`; defaults to the dataset's version and is required for a list of examples.
    :returns: The document, ready for `json.dumps`.
    :raises ValueError: For an unknown version, a missing one, or v1.1 with impossible questions or plausible answers.
    """
    dataset = data if isinstance(data, SquadDataset) else None
    examples = dataset.examples if dataset is not None else list(data)
    has_gold = dataset.has_gold if dataset is not None else True
    version = version or (dataset.version if dataset is not None else None)
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, not {version!r}.")
    if version == "1.1":
        v2_only = [example.id for example in examples if example.is_impossible or example.plausible_answers]
        if v2_only:
            raise ValueError(f"SQuAD v1.1 has no impossible questions or plausible answers: {v2_only[:5]}.")
    articles: list[dict[str, Any]] = []
    previous: SquadExample | None = None
    for example in examples:
        if previous is None or example.title != previous.title:
            article: dict[str, Any] = {"title": example.title} if example.title is not None else {}
            article["paragraphs"] = []
            articles.append(article)
            previous = None
        paragraphs = articles[-1]["paragraphs"]
        if previous is None or example.context != previous.context:
            paragraphs.append({"context": example.context, "qas": []})
        paragraphs[-1]["qas"].append(_qa(example, version, has_gold))
        previous = example
    return {"version": "1.1" if version == "1.1" else "v2.0", "data": articles}


def _qa(example: SquadExample, version: str, has_gold: bool) -> dict[str, Any]:
    qa: dict[str, Any] = {"id": example.id, "question": example.question}
    if has_gold:
        qa["answers"] = [{"text": a.text, "answer_start": a.answer_start} for a in example.answers]
    if version == "2.0" and (has_gold or example.is_impossible):
        qa["is_impossible"] = example.is_impossible
    if example.plausible_answers:
        qa["plausible_answers"] = [{"text": a.text, "answer_start": a.answer_start} for a in example.plausible_answers]
    return qa


__all__ = [
    "GoldAnswer",
    "MisalignedAnswer",
    "SquadDataset",
    "SquadExample",
    "SquadFormatError",
    "json_or_none",
    "read_squad",
    "shown",
    "squad_from_json",
    "squad_json",
    "write_squad_json",
]
