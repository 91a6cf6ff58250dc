"""
Splitting long documents into passages of words, sentences, passages, pages or lines, with Haystack's
`DocumentSplitter` semantics.
"""

from copy import deepcopy
from typing import Any, Literal

from qa_core.document import Document

SplitBy = Literal["word", "sentence", "passage", "page", "line"]
# The delimiter each character-based unit ends with (Haystack's `_CHARACTER_SPLIT_BY_MAPPING`).
SPLIT_DELIMITERS = {"word": " ", "passage": "\n\n", "page": "\f", "line": "\n"}
SPLIT_BY = ("word", "sentence", "passage", "page", "line")


def split_documents(
    documents: list[Document],
    split_length: int = 200,
    split_overlap: int = 0,
    split_threshold: int = 0,
    split_by: SplitBy = "word",
) -> list[Document]:
    """
    Splits each document into passages of `split_length` units, as Haystack's `DocumentSplitter` does with the same
    `split_by`: words are the pieces between single spaces (`content.split(" ")`), passages the pieces between blank
    lines (`"\\n\\n"`), pages the pieces between form feeds, lines the pieces between newlines, each keeping its
    delimiter; sentences are `qa_core.ingest.sentences.split_sentences`' (Haystack's `SentenceSplitter`'s, on NLTK's
    English Punkt model shipped in a wheel instead of downloaded). Consecutive passages share `split_overlap` units.

    Each passage's meta is its source's meta plus `source_id` (the source document's id), `split_id` (its rank
    within the source), `split_idx_start` (the character offset of its start in the source), `page_number` (counting
    form feeds), and, when `split_overlap > 0`, `_split_overlap` (the ranges shared with its neighbours). Passage
    ids are those Haystack gives. Documents with empty content are skipped.

    Usage example:
    ```python
    passages = split_documents([Document(content="one two three four five")], split_length=3, split_overlap=1)
    assert [p.content for p in passages] == ["one two three ", "three four five"]
    assert passages[1].meta["split_idx_start"] == 8
    ```

    :param documents: The documents to split.
    :param split_length: Most words per passage (at least 1).
    :param split_overlap: Words shared by consecutive passages (at least 0, less than `split_length`).
    :param split_threshold: A trailing passage of fewer units is appended to the previous passage instead.
    :param split_by: The unit: "word", "sentence", "passage", "page" or "line".
    :returns: The passages, source by source.
    :raises ValueError: If a parameter is out of range or a document's content is `None`.
    """
    if split_by not in SPLIT_BY:
        raise ValueError(f"split_by must be one of {', '.join(SPLIT_BY)}, not {split_by!r}.")
    if split_length <= 0:
        raise ValueError(f"split_length must be greater than 0, not {split_length}.")
    if not 0 <= split_overlap < split_length:
        raise ValueError(f"split_overlap must be at least 0 and less than split_length, not {split_overlap}.")
    passages: list[Document] = []
    for doc in documents:
        if doc.content is None:
            raise ValueError(f"split_documents works with text documents only, but document {doc.id} has no content.")
        if doc.content == "":
            continue
        texts, pages, starts = _concatenate_units(
            _units(doc.content, split_by), split_length, split_overlap, split_threshold, split_by == "page"
        )
        meta = deepcopy(doc.meta)
        meta["source_id"] = doc.id
        passages += _passages(texts, pages, starts, meta, split_overlap)
    return passages


def _units(content: str, split_by: str) -> list[str]:
    """The document's units, each with its trailing delimiter (or whitespace, for sentences)."""
    if split_by == "sentence":
        from qa_core.ingest.sentences import split_sentences

        return split_sentences(content)
    delimiter = SPLIT_DELIMITERS[split_by]
    pieces = content.split(delimiter)
    return [piece + delimiter for piece in pieces[:-1]] + pieces[-1:]


def _concatenate_units(
    units: list[str], split_length: int, split_overlap: int, split_threshold: int, by_page: bool = False
) -> tuple[list[str], list[int], list[int]]:
    """
    Haystack's `DocumentSplitter._concatenate_units`: window texts, their start pages and start offsets. By page,
    each unit passed counts one page (Haystack's rule, which also holds for the last page, that has no form feed).
    """
    step = split_length - split_overlap
    texts: list[str] = []
    pages: list[int] = []
    starts: list[int] = []
    cur_start, cur_page, covered = 0, 1, 0
    # more_itertools.windowed(units, split_length, step=step): windows start every `step` units until one reaches
    # the end; the last one may be short.
    for seg_start in range(0, max(len(units) - split_length, 0) + step, step):
        current = units[seg_start : seg_start + split_length]
        text = "".join(current)
        # A window adding no new text (only overlap, or the empty unit after a trailing space) is skipped.
        if split_overlap > 0 and texts and not "".join(current[max(0, covered - seg_start) :]):
            continue
        covered = max(covered, seg_start + len(current))
        if len(current) < split_threshold and texts:
            texts[-1] += "".join(current[split_overlap:])
        elif text:
            texts.append(text)
            pages.append(cur_page)
            starts.append(cur_start)
        processed = current[:step]
        cur_start += len("".join(processed))
        cur_page += len(processed) if by_page else sum(unit.count("\f") for unit in processed)
    return texts, pages, starts


def _passages(
    texts: list[str], pages: list[int], starts: list[int], meta: dict[str, Any], split_overlap: int
) -> list[Document]:
    """Haystack's `DocumentSplitter._create_docs_from_splits`: the passages with their meta."""
    passages: list[Document] = []
    for i, (text, start) in enumerate(zip(texts, starts, strict=True)):
        passage_meta = deepcopy(meta)
        passage_meta["page_number"] = pages[i] + _leading_page_breaks(text)
        passage_meta["split_id"] = i
        passage_meta["split_idx_start"] = start
        passage = Document(content=text, meta=passage_meta)  # the id covers the meta so far, as in Haystack
        passages.append(passage)
        if split_overlap <= 0:
            continue
        passage.meta["_split_overlap"] = []
        if i > 0:
            _link_overlap(passages[i - 1], starts[i - 1], passage, start)
    return passages


def _link_overlap(previous: Document, previous_start: int, current: Document, current_start: int) -> None:
    """Records the text two consecutive passages share in both their `_split_overlap` lists."""
    overlap = (current_start - previous_start, len(previous.content))
    if overlap[0] < overlap[1] and current.content.startswith(previous.content[overlap[0] : overlap[1]]):
        current.meta["_split_overlap"].append({"doc_id": previous.id, "range": overlap})
        previous.meta["_split_overlap"].append({"doc_id": current.id, "range": (0, overlap[1] - overlap[0])})


def _leading_page_breaks(text: str) -> int:
    """Form feeds a passage starts with, unless it is nothing but form feeds (Haystack's `_leading_page_breaks`)."""
    stripped = text.lstrip("\f")
    return len(text) - len(stripped) if stripped else 0
