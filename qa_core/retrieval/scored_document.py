"""ScoredDocument: a retrieved Document with its retrieval score, like Haystack's `Document.score`."""

from dataclasses import dataclass
from typing import Any

from qa_core.document import Document


@dataclass
class ScoredDocument(Document):
    """
    A `Document` as a retriever returns it: the same content, id and meta, plus the score it was retrieved with.

    Usage example:
    ```python
    doc = ScoredDocument(content="Python is a language", id="a", score=1.25)
    assert isinstance(doc, Document) and doc.score == 1.25
    ```

    :param score: The retrieval score (raw BM25, or scaled to 0..1 when asked), `None` when not scored.
    """

    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the document to a dictionary.

        :returns: `{"id": ..., "content": ..., "meta": {...}, "score": ...}`.
        """
        return {**super().to_dict(), "score": self.score}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScoredDocument":
        """
        Deserializes a document from `to_dict()`'s form or Haystack's (a top-level `score`, meta flattened or not).

        :param data: The dictionary.
        :returns: The document.
        """
        document = Document.from_dict(data)
        return cls(content=document.content, id=document.id, meta=document.meta, score=data.get("score"))
