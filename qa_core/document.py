"""The Document dataclass: a piece of text to search for answers, with metadata."""

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Document:
    """
    A text to search for answers in.

    Usage example:
    ```python
    doc = Document(content="Paris is the capital of France.", meta={"page_number": 1})
    assert doc.id == Document(content="Paris is the capital of France.", meta={"page_number": 1}).id
    ```

    :param content: The text, or `None` for a document without text (readers skip it).
    :param id: Unique identifier. When not given, it is a SHA-256 hash of `content` and `meta`,
        computed the same way as Haystack's `Document` so that ids agree between the two.
    :param meta: Arbitrary JSON-serialisable metadata. `meta["page_number"]` (an int) enables answer page numbers.
    """

    content: str | None
    id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.content is not None and not isinstance(self.content, str):
            raise ValueError(f"Document content must be a string or None, not {type(self.content).__name__}.")
        if not self.id:
            self.id = self._create_id()

    def _create_id(self) -> str:
        # Same fields and order as haystack.Document._create_id (text, dataframe, blob, mime type, meta,
        # embedding, sparse embedding), so a Document built here has the id Haystack would give it.
        meta = json.dumps(self.meta, sort_keys=True, default=str) if self.meta else "{}"
        data = f"{self.content or None}{None}{None!r}{None}{meta}{None}{''}"
        return hashlib.sha256(data.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the document to a dictionary.

        :returns: `{"id": ..., "content": ..., "meta": {...}}`.
        """
        return {"id": self.id, "content": self.content, "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Document":
        """
        Deserializes a document from `to_dict()`'s form or from Haystack's flattened form (meta keys at the top level).

        :param data: The dictionary.
        :returns: The document.
        """
        known = {"id", "content", "meta"}
        flattened_meta = {key: value for key, value in data.items() if key not in known and key not in _HAYSTACK_FIELDS}
        return cls(content=data.get("content"), id=data.get("id"), meta={**(data.get("meta") or {}), **flattened_meta})


# Haystack Document fields that carry no meaning here; dropped when reading Haystack's flattened dictionaries.
_HAYSTACK_FIELDS = {"blob", "score", "embedding", "sparse_embedding", "content_type", "id_hash_keys", "dataframe"}

__all__ = ["Document"]
