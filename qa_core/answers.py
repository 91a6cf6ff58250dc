"""Answer dataclasses: `ExtractedAnswer` (a span found by a reader) and `GeneratedAnswer` (a parsed generator reply)."""

from dataclasses import asdict, dataclass, field
from typing import Any

from qa_core.document import Document


def _unwrap_legacy(data: dict[str, Any]) -> dict[str, Any]:
    """Older serialisations wrapped the fields in an `init_parameters` envelope."""
    return data["init_parameters"] if "init_parameters" in data else data


@dataclass
class ExtractedAnswer:
    """
    An answer span extracted from a document, or the no-answer entry (`data=None`, `document=None`).

    Usage example:
    ```python
    doc = Document(content="Paris is the capital of France.")
    answer = ExtractedAnswer(query="Capital of France?", score=0.9, data="Paris", document=doc,
                             document_offset=ExtractedAnswer.Span(0, 5))
    assert ExtractedAnswer.from_dict(answer.to_dict()) == answer
    ```

    :param query: The question.
    :param score: Probability-like score in [0, 1], comparable across documents.
    :param data: The answer text, `None` for the no-answer entry.
    :param document: The document the answer comes from.
    :param context: Text around the answer (when the reader's `context_window_size` is set).
    :param document_offset: Character offsets of the answer in the document.
    :param context_offset: Character offsets of the answer in `context`.
    :param meta: Extra data, for instance `answer_page_number`.
    """

    query: str
    score: float
    data: str | None = None
    document: Document | None = None
    context: str | None = None
    document_offset: "ExtractedAnswer.Span | None" = None
    context_offset: "ExtractedAnswer.Span | None" = None
    meta: dict[str, Any] = field(default_factory=dict)

    @dataclass
    class Span:
        """Character offsets `[start, end)`."""

        start: int
        end: int

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the answer to a dictionary.

        :returns: A dictionary that `from_dict` turns back into an equal answer.
        """
        return {
            "data": self.data,
            "query": self.query,
            "document": self.document.to_dict() if self.document is not None else None,
            "context": self.context,
            "score": self.score,
            "document_offset": asdict(self.document_offset) if self.document_offset is not None else None,
            "context_offset": asdict(self.context_offset) if self.context_offset is not None else None,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExtractedAnswer":
        """
        Deserializes an answer; also accepts the legacy form wrapped in `{"init_parameters": {...}}`.

        :param data: The dictionary.
        :returns: The answer.
        """
        data = _unwrap_legacy(data)
        document = data.get("document")
        document_offset = data.get("document_offset")
        context_offset = data.get("context_offset")
        return cls(
            query=data["query"],
            score=data["score"],
            data=data.get("data"),
            document=Document.from_dict(document) if document is not None else None,
            context=data.get("context"),
            document_offset=cls.Span(**document_offset) if document_offset is not None else None,
            context_offset=cls.Span(**context_offset) if context_offset is not None else None,
            meta=data.get("meta", {}),
        )


@dataclass
class GeneratedAnswer:
    """
    An answer written by a generator and parsed by `AnswerBuilder`.

    :param data: The answer text.
    :param query: The question.
    :param documents: The documents the answer refers to (copies with `source_index` and `referenced` in meta).
    :param meta: The reply's metadata plus `all_messages` (all replies).
    """

    data: str
    query: str
    documents: list[Document]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the answer to a dictionary.

        :returns: A dictionary that `from_dict` turns back into an equal answer.
        """
        meta = dict(self.meta)
        if "all_messages" in meta:  # chat-message objects serialise through their own to_dict
            meta["all_messages"] = [
                message.to_dict() if hasattr(message, "to_dict") else message for message in meta["all_messages"]
            ]
        return {
            "data": self.data,
            "query": self.query,
            "documents": [document.to_dict() for document in self.documents],
            "meta": meta,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GeneratedAnswer":
        """
        Deserializes an answer; also accepts the legacy form wrapped in `{"init_parameters": {...}}`.

        :param data: The dictionary.
        :returns: The answer.
        """
        data = _unwrap_legacy(data)
        return cls(
            data=data["data"],
            query=data["query"],
            documents=[Document.from_dict(document) for document in data.get("documents", [])],
            meta=dict(data.get("meta", {})),
        )
