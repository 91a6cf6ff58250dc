"""AnswerBuilder: turns generator replies into `GeneratedAnswer`s with Haystack's AnswerBuilder semantics."""

import inspect
import logging
import re
from dataclasses import dataclass, replace
from typing import Any, Protocol

from qa_core.answers import GeneratedAnswer
from qa_core.document import Document
from qa_core.settings import Settings, setting

logger = logging.getLogger(__name__)

DEFAULT_REFERENCE_PATTERN = r"\[(\d+)\]"
# Used instead of the default pattern when reference ranges are expanded, so that `[1-3,5]` is matched.
EXPANDED_REFERENCE_PATTERN = r"\[(\d+(?:[,-]\d+)*)\]"


class Reply(Protocol):
    """A chat reply such as Haystack's `ChatMessage`: its text, and optionally `meta`."""

    text: str | None


@dataclass(frozen=True)
class AnswerBuilderSettings(Settings):
    """How generator replies are parsed (`AnswerBuilder`'s parameters; `answer_pattern` is its `pattern`)."""

    answer_pattern: str | None = setting(None, "regex extracting the answer from a reply (at most one group)")
    reference_pattern: str | None = setting(None, r"regex finding 1-based document references, e.g. \[(\d+)\]")
    last_message_only: bool = setting(False, "parse only the last reply of each question")
    return_only_referenced_documents: bool = setting(True, "referenced_document_ids lists only referenced documents")
    expand_reference_ranges: bool = setting(False, "read [1-3,5] as documents 1, 2, 3 and 5")

    def problems(self) -> list[str]:
        problems = []
        for name in ("answer_pattern", "reference_pattern"):
            try:
                check_pattern(getattr(self, name))
            except ValueError as error:
                problems.append(f"{name}: {error}")
        return problems


_DEFAULTS = AnswerBuilderSettings()


class AnswerBuilder:
    """
    Turns a query and a generator's replies into `GeneratedAnswer`s, parsing the answer and document references
    out of each reply with regular expressions.

    Usage example:
    ```python
    from qa_core import AnswerBuilder, Document

    docs = [Document(content="Berlin is the capital of Germany."), Document(content="Paris is the capital of France.")]
    builder = AnswerBuilder(pattern=r"Answer: (.*)", reference_pattern=r"\\[(\\d+)\\]")
    answer = builder.run(query="Capital of France?", replies=["Answer: Paris [2]"], documents=docs)["answers"][0]
    assert answer.data == "Paris [2]"
    assert [doc.meta["source_index"] for doc in answer.documents] == [2]
    ```

    It reproduces Haystack's `AnswerBuilder`, with these differences:
    - Run-time overrides replace the constructor's value whenever they are not `None` (Haystack ignores falsy
      overrides such as `""`); `run(reference_pattern="")` thus turns reference parsing off for one call.
    - Invalid regular expressions, and `reference_pattern`s with more than one capture group, raise `ValueError`
      when the builder is made or run rather than `re.error` (or a `TypeError`) while parsing a reply.
    - `meta=[]` for a non-empty list of replies raises `ValueError` (Haystack treats it as `None`).
    - Out-of-range references are logged also when all documents are returned, and a malformed range such as
      `[1-2-3]` is skipped with a warning instead of raising.

    :param pattern: Regular expression that finds the answer in a reply, with at most one capture group.
        With a group the group's text is the answer, without one the whole match; when nothing matches the answer
        is `""`. `None` (the default) makes the whole reply the answer.
        Example: `Answer: (.*)` finds "Paris" in "The argument. Answer: Paris".
    :param reference_pattern: Regular expression that finds 1-based document indices in a reply, such as
        `\\[(\\d+)\\]` for "Paris [2]". When given, each returned document's meta has `referenced` (a bool).
        `None` (the default) or `""` parses no references and returns all documents.
    :param last_message_only: If True, only the last reply (and the last entry of `meta`) makes an answer.
    :param return_only_referenced_documents: With `reference_pattern`, return only the referenced documents
        (the default) or, if False, all documents. Has no effect without `reference_pattern`.
    :param expand_reference_ranges: If True, a reference such as `[1-3,5]` stands for documents 1, 2, 3 and 5;
        range ends beyond the number of documents are clamped. With the default reference pattern `\\[(\\d+)\\]`
        the broader pattern `\\[(\\d+(?:[,-]\\d+)*)\\]` is used to match such references.
    :raises ValueError: If a pattern is not a valid regular expression or has more than one capture group.
    """

    def __init__(
        self,
        pattern: str | None = _DEFAULTS.answer_pattern,
        reference_pattern: str | None = _DEFAULTS.reference_pattern,
        last_message_only: bool = _DEFAULTS.last_message_only,
        *,
        return_only_referenced_documents: bool = _DEFAULTS.return_only_referenced_documents,
        expand_reference_ranges: bool = _DEFAULTS.expand_reference_ranges,
    ) -> None:
        check_pattern(pattern)
        check_pattern(reference_pattern)
        self.pattern = pattern
        self.reference_pattern = reference_pattern
        self.last_message_only = last_message_only
        self.return_only_referenced_documents = return_only_referenced_documents
        self.expand_reference_ranges = expand_reference_ranges

    def run(
        self,
        query: str,
        replies: list[str] | list[Reply],
        meta: list[dict[str, Any]] | None = None,
        documents: list[Document] | None = None,
        pattern: str | None = None,
        reference_pattern: str | None = None,
        expand_reference_ranges: bool | None = None,
    ) -> dict[str, list[GeneratedAnswer]]:
        """
        Builds one answer per reply (or for the last reply only, with `last_message_only`).

        `pattern`, `reference_pattern` and `expand_reference_ranges` override the constructor's values for this call
        whenever they are not `None`, so an explicit `""` or `False` is honoured.

        :param query: The question, copied into every answer.
        :param replies: The generator's replies: strings, or objects with a `text` attribute (`None` reads as `""`)
            and optionally a `meta` dictionary, such as Haystack's `ChatMessage`.
        :param meta: One metadata dictionary per reply, merged over the reply's own `meta` into the answer's meta.
        :param documents: The documents given to the generator. The answers hold copies of them (the inputs are not
            modified) whose meta has `source_index`, the 1-based position in `documents`, and, when a reference
            pattern is in use, `referenced`.
        :param pattern: Overrides the constructor's `pattern` for this call.
        :param reference_pattern: Overrides the constructor's `reference_pattern` for this call.
        :param expand_reference_ranges: Overrides the constructor's `expand_reference_ranges` for this call.
        :returns: `{"answers": [...]}`, one `GeneratedAnswer` per reply used. Each answer's meta is the reply's meta
            plus `all_messages`, the list of all replies.
        :raises ValueError: If `meta` does not have one entry per reply, or if a pattern is invalid (see the class).
        """
        if meta is None:
            meta = [{} for _ in replies]
        elif len(meta) != len(replies):
            raise ValueError(f"Number of replies ({len(replies)}) and of metadata ({len(meta)}) must match.")

        pattern = self.pattern if pattern is None else pattern
        reference_pattern = self.reference_pattern if reference_pattern is None else reference_pattern
        if expand_reference_ranges is None:
            expand_reference_ranges = self.expand_reference_ranges
        check_pattern(pattern)
        check_pattern(reference_pattern)
        if expand_reference_ranges and reference_pattern == DEFAULT_REFERENCE_PATTERN:
            reference_pattern = EXPANDED_REFERENCE_PATTERN

        used = list(zip(replies, meta, strict=True))
        if self.last_message_only:
            used = used[-1:]

        answers = []
        for reply, given_meta in used:
            if isinstance(reply, str):
                text, reply_meta = reply, {}
            else:
                text, reply_meta = reply.text or "", getattr(reply, "meta", None) or {}
            answers.append(
                GeneratedAnswer(
                    data=_extract_answer(text, pattern),
                    query=query,
                    documents=self._answer_documents(text, documents or [], reference_pattern, expand_reference_ranges),
                    meta={**reply_meta, **given_meta, "all_messages": list(replies)},
                )
            )
        return {"answers": answers}

    def _answer_documents(
        self, reply: str, documents: list[Document], reference_pattern: str | None, expand_ranges: bool
    ) -> list[Document]:
        """Copies of the documents an answer holds, with `source_index` (and `referenced`) added to their meta."""
        if not reference_pattern:
            return [replace(doc, meta={**doc.meta, "source_index": i + 1}) for i, doc in enumerate(documents)]
        if not documents:  # nothing to refer to: references are not parsed, nor warned about
            return []

        references = _extract_references(reply, reference_pattern, expand_ranges, len(documents))
        referenced = {reference for reference in references if 1 <= reference <= len(documents)}
        for reference in sorted(references - referenced):
            logger.warning("Document reference %d in the reply is out of range (1 to %d).", reference, len(documents))
        positions = sorted(referenced) if self.return_only_referenced_documents else range(1, len(documents) + 1)
        return [
            replace(documents[i - 1], meta={**documents[i - 1].meta, "source_index": i, "referenced": i in referenced})
            for i in positions
        ]

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the builder.

        :returns: `{"type": "qa_core.answer_builder.AnswerBuilder", "init_parameters": {...}}` with every constructor
            parameter.
        """
        parameters = {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "init_parameters": parameters}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AnswerBuilder":
        """
        Rebuilds a builder from `to_dict()`'s form (Haystack's `AnswerBuilder.to_dict()` form is read the same way).

        :param data: The dictionary.
        :returns: The builder.
        """
        return cls(**data.get("init_parameters", {}))

    @classmethod
    def from_settings(cls, settings: AnswerBuilderSettings) -> "AnswerBuilder":
        """A builder with the given settings."""
        values = settings.as_dict()
        return cls(pattern=values.pop("answer_pattern"), **values)


def check_pattern(pattern: str | None) -> None:
    """Raises `ValueError` if `pattern` is not a regular expression with at most one capture group."""
    if pattern is None:
        return
    try:
        groups = re.compile(pattern).groups
    except re.error as error:
        raise ValueError(f"Pattern '{pattern}' is not a valid regular expression: {error}.") from error
    if groups > 1:
        raise ValueError(
            f"Pattern '{pattern}' contains {groups} capture groups. Please specify a pattern with at most one."
        )


def _extract_answer(reply: str, pattern: str | None) -> str:
    """The answer in `reply`: the whole reply without a pattern, else the capture group or the whole match."""
    if pattern is None:
        return reply
    match = re.search(pattern, reply)
    if match is None:
        return ""
    return match.group(1) if match.lastindex else match.group(0)


def _extract_references(reply: str, reference_pattern: str, expand_ranges: bool, num_documents: int) -> set[int]:
    """
    The 1-based document references found in `reply`, in or out of range.

    With `expand_ranges`, a match such as `1-3,5` gives 1, 2, 3 and 5; a range's end is clamped to `num_documents`
    (so `[1-999999999]` does not build a huge set) and a reversed range such as `3-1` gives nothing.
    """
    references: set[int] = set()
    for match in re.findall(reference_pattern, reply):
        if not expand_ranges:
            references.add(int(match))
            continue
        for part in match.split(","):
            bounds = [int(bound) for bound in part.split("-")] if part.strip() else []
            if len(bounds) == 1:
                references.add(bounds[0])
            elif len(bounds) == 2:
                references.update(range(bounds[0], min(bounds[1], num_documents) + 1))
            elif bounds:
                logger.warning("Malformed document reference range '%s' in the reply is skipped.", part)
    return references


__all__ = ["AnswerBuilder"]
