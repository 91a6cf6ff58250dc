"""
The passages of a split index (`split_length`): the documents cut into passages of words before indexing, and
where each indexed passage lies in its source document. Saved beside each shard's index files as
`passages.json` (plain JSON, never unpickled), written by the driver and read by the retrieval actors, which
turn a retrieved passage into its source document's id and the range the reader reads there.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from qa_core.document import Document
from qa_core.retrieval.splitter import split_documents

PASSAGES_FILE = "passages.json"


@dataclass(frozen=True)
class Passages:
    """
    Where the passages of an index (or of one of its shards) come from, in index order: each passage's source
    document id and its character range `[start, end)` in the source's content (`content[start:end]` is the
    passage's text).
    """

    source_ids: list[str]
    starts: list[int]
    ends: list[int]

    def __len__(self) -> int:
        return len(self.source_ids)

    def __getitem__(self, window: slice) -> "Passages":
        """The passages of a contiguous window (a shard's)."""
        return Passages(self.source_ids[window], self.starts[window], self.ends[window])

    @classmethod
    def concat(cls, parts: list["Passages"]) -> "Passages":
        """The passages of `parts`, one after the other."""
        return cls(*([value for part in parts for value in getattr(part, name)] for name in _FIELDS))

    def save(self, folder: Path) -> None:
        """Writes `passages.json` into an index (or shard) folder."""
        with (folder / PASSAGES_FILE).open("w", encoding="utf-8") as file:
            json.dump({name: getattr(self, name) for name in _FIELDS}, file, ensure_ascii=False)

    @classmethod
    def load(cls, folder: Path) -> "Passages | None":
        """
        The passages of an index (or shard) folder; None when it has none (an index of whole documents).

        :raises ValueError: If `passages.json` is not three lists of equal length (ids, then int offsets).
        """
        path = folder / PASSAGES_FILE
        if not path.exists():
            return None
        with path.open(encoding="utf-8") as file:
            values = json.load(file)
        kinds = {"source_ids": str, "starts": int, "ends": int}
        if not isinstance(values, dict) or any(
            not isinstance(values.get(name), list) or not all(type(value) is kind for value in values[name])
            for name, kind in kinds.items()
        ):
            raise ValueError(f"{path} must hold lists of source_ids (strings), starts and ends (ints).")
        if not len(values["source_ids"]) == len(values["starts"]) == len(values["ends"]):
            raise ValueError(f"{path}: source_ids, starts and ends differ in length.")
        return cls(values["source_ids"], values["starts"], values["ends"])


_FIELDS = ("source_ids", "starts", "ends")


def split_batch(
    ids: list[str], texts: list[str], split_length: int, split_overlap: int
) -> tuple[list[str], list[str], Passages]:
    """
    Documents split into passages of `split_length` words sharing `split_overlap` (Haystack's
    `DocumentSplitter(split_by="word")`, `qa_core.retrieval.split_documents`): the passages' ids (the ones
    Haystack gives), texts and sources. Documents with empty content make no passage, as in Haystack.

    :param ids: The documents' ids.
    :param texts: Their contents (none null).
    :returns: The passage ids, their texts and where they lie in their documents, documents in order.
    """
    documents = [Document(content=text, id=doc_id) for doc_id, text in zip(ids, texts, strict=True)]
    passages = split_documents(documents, split_length, split_overlap)
    starts = [passage.meta["split_idx_start"] for passage in passages]
    return (
        [passage.id for passage in passages],
        [passage.content for passage in passages],
        Passages(
            [passage.meta["source_id"] for passage in passages],
            starts,
            [start + len(passage.content) for start, passage in zip(starts, passages, strict=True)],
        ),
    )
