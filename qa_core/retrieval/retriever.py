"""BM25Retriever: Haystack's `InMemoryBM25Retriever` ranking over a sparse BM25 index, many queries at once."""

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np

from qa_core.document import Document
from qa_core.retrieval.filters import check_filters, document_columns, matching_mask
from qa_core.retrieval.fingerprint import fingerprint
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.scored_document import ScoredDocument
from qa_core.retrieval.scoring import DEFAULT_ALGORITHM, resolve_parameters
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX, Tokenizer
from qa_core.retrieval.topk import NO_POSITION, check_k

# Haystack's BM25_SCALING_FACTOR: a scaled score is expit(score / 8).
BM25_SCALING_FACTOR = 8
# The documents of an index folder written by `BM25Retriever.save`, one `Document.to_dict()` JSON per line.
DOCUMENTS_FILE = "documents.jsonl"


class BM25Retriever:
    """
    Retrieves the documents that best match a query by BM25, ranked and scored as Haystack's
    `InMemoryBM25Retriever` over an `InMemoryDocumentStore` holding the same documents.

    Documents without content are never returned and do not count in the corpus statistics (as in Haystack);
    documents with empty content count as documents of length 0. `run_batch` answers many queries with one index.

    Usage example:
    ```python
    from qa_core import Document
    from qa_core.retrieval import BM25Retriever

    retriever = BM25Retriever(documents=[Document(content="Python is a language"), Document(content="Snakes")])
    retriever.warm_up()
    hits = retriever.run(query="What is Python?")["documents"]
    assert hits[0].content == "Python is a language" and hits[0].score > 0
    only_snakes = {"field": "content", "operator": "==", "value": "Snakes"}
    assert retriever.run(query="What is Python?", filters=only_snakes)["documents"] == []  # no word in common
    ```

    Metadata filters take Haystack 2's syntax and semantics (`filters`): the hits are the best of the documents that
    match, scored as without the filter; run-time filters replace the retriever's (Haystack's default
    `FilterPolicy.REPLACE`), where `{}` at run time means no filter (Haystack falls back to the retriever's).

    Differences from Haystack: `top_k` must be at least 1 at run time too (Haystack returns nothing for 0); an unknown BM25 parameter is an error (Haystack ignores it); a corpus whose documents have no
    terms is an error (Haystack scores them all 0); the `"Lucene"` algorithm is extra.
    """

    def __init__(
        self,
        documents: list[Document] | None = None,
        index_path: str | Path | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        bm25_algorithm: str = DEFAULT_ALGORITHM,
        bm25_parameters: dict[str, float] | None = None,
        scale_score: bool = False,
        bm25_tokenization_regex: str = DEFAULT_TOKENIZATION_REGEX,
    ) -> None:
        """
        Creates the retriever; `warm_up()` builds or loads the index.

        :param documents: The documents to search. With `index_path` too, the index there must have been built
            from exactly these (checked by fingerprint).
        :param index_path: A folder written by `save()` to load instead of building; without `documents`, the
            documents saved there are searched.
        :param filters: A metadata filter every search applies unless `run` is given one (`filters` module).
        :param top_k: Documents to return per query (at least 1).
        :param bm25_algorithm: `"BM25L"` (Haystack's default), `"BM25Okapi"`, `"BM25Plus"` or `"Lucene"`.
        :param bm25_parameters: Some of `k1`, `b`, and `delta` (BM25L, BM25Plus) or `epsilon` (BM25Okapi);
            the others take Haystack's defaults (`k1=1.5`, `b=0.75`, `delta=0.5` / `1.0`, `epsilon=0.25`).
        :param scale_score: Return `expit(score / 8)` instead of the raw score (Haystack's scaling).
        :param bm25_tokenization_regex: Haystack's `bm25_tokenization_regex`.
        :raises ValueError: If neither `documents` nor `index_path` is given, or an option is invalid.
        :raises FilterError: If `filters` is malformed.
        """
        if documents is None and index_path is None:
            raise ValueError("BM25Retriever needs documents, an index_path, or both.")
        check_k(top_k)
        check_filters(filters)
        self._parameters = resolve_parameters(bm25_algorithm, bm25_parameters)
        Tokenizer(bm25_tokenization_regex)  # raises ValueError for a pattern that does not compile
        self.documents = documents
        self.index_path = None if index_path is None else str(index_path)
        self.filters = filters
        self.top_k = top_k
        self.bm25_algorithm = bm25_algorithm
        self.bm25_parameters = bm25_parameters
        self.scale_score = scale_score
        self.bm25_tokenization_regex = bm25_tokenization_regex
        self._index: BM25Index | None = None
        self._searched: list[Document] = []
        self._columns: dict[str, list[Any]] | None = None  # the searched documents' fields, once filtered on

    def warm_up(self) -> None:
        """
        Loads the index from `index_path`, or builds it from `documents`. Calling it again does nothing.

        :raises ValueError: If the loaded index was built with other options or from other documents, or the
            documents cannot be indexed (none with content, no terms, duplicate ids).
        """
        if self._index is not None:
            return
        if self.index_path is None:
            searched = [doc for doc in self.documents if doc.content is not None]
            index = BM25Index.build(
                [doc.id for doc in searched],
                [doc.content for doc in searched],
                self.bm25_algorithm,
                self._parameters,
                self.bm25_tokenization_regex,
            )
        else:
            index, searched = self._load(Path(self.index_path))
        self._index, self._searched = index, searched

    def _load(self, path: Path) -> tuple[BM25Index, list[Document]]:
        index = BM25Index.load(path)
        if (index.algorithm, index.parameters, index.tokenizer.regex) != (
            self.bm25_algorithm,
            self._parameters,
            self.bm25_tokenization_regex,
        ):
            raise ValueError(
                f"The index at {path} was built with {index.algorithm} {index.parameters} and tokenization regex "
                f"{index.tokenizer.regex!r}, not the retriever's {self.bm25_algorithm} {self._parameters} and "
                f"{self.bm25_tokenization_regex!r}."
            )
        if index.doc_offset != 0 or index.n_docs != index.corpus.n_docs:
            raise ValueError(f"The index at {path} is one shard of a larger corpus; the retriever needs a whole one.")
        if self.documents is None:
            if not (path / DOCUMENTS_FILE).is_file():
                raise ValueError(
                    f"The index at {path} holds no {DOCUMENTS_FILE} (an index saved without its documents, as "
                    "the bulk job's are): pass the documents it was built from as `documents`."
                )
            with (path / DOCUMENTS_FILE).open(encoding="utf-8") as file:
                searched = [Document.from_dict(json.loads(line)) for line in file]
        else:
            searched = [doc for doc in self.documents if doc.content is not None]
        if fingerprint([doc.id for doc in searched], [doc.content for doc in searched]) != index.fingerprint:
            raise ValueError(f"The index at {path} was built from other documents than the ones given.")
        return index, searched

    def save(self, path: str | Path) -> None:
        """
        Writes the index and the searched documents into a folder that `BM25Retriever(index_path=path)` loads.

        :param path: The folder, created if needed.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        index = self._warm_index()
        index.save(path)
        with (Path(path) / DOCUMENTS_FILE).open("w", encoding="utf-8") as file:
            for doc in self._searched:
                file.write(json.dumps(doc.to_dict(), ensure_ascii=False) + "\n")

    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, Any]:
        """
        Retrieves the documents that best match a query.

        :param query: The query, a non-empty string.
        :param filters: A metadata filter; `None` for the retriever's `filters`.
        :param top_k: Most documents to return; `None` for the retriever's `top_k`.
        :param scale_score: Scale the scores to 0..1; `None` for the retriever's `scale_score`.
        :returns: `{"documents": [ScoredDocument, ...]}`, best first; ties in the order of `documents`.
        :raises RuntimeError: If `warm_up()` was not called.
        :raises ValueError: If the query is empty or `top_k < 1`.
        :raises FilterError: If the filter is malformed or cannot be evaluated on the documents.
        """
        documents = self.run_batch([query], filters=filters, top_k=top_k, scale_score=scale_score)["documents"]
        return {"documents": documents[0]}

    def run_batch(
        self,
        queries: list[str],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, list[list[ScoredDocument]]]:
        """
        Retrieves the best documents for many queries; each list equals what `run` returns for its query.

        :param queries: The queries, non-empty strings.
        :param filters: A metadata filter for every query; `None` for the retriever's `filters`.
        :param top_k: Most documents per query; `None` for the retriever's `top_k`.
        :param scale_score: Scale the scores to 0..1; `None` for the retriever's `scale_score`.
        :returns: `{"documents": [[ScoredDocument, ...], ...]}`, one list per query, best first.
        :raises RuntimeError: If `warm_up()` was not called.
        :raises ValueError: If a query is empty or `top_k < 1`.
        :raises FilterError: If the filter is malformed or cannot be evaluated on the documents.
        """
        index = self._warm_index()
        filters = self.filters if filters is None else filters
        top_k = self.top_k if top_k is None else top_k
        scale_score = self.scale_score if scale_score is None else scale_score
        allowed = None
        if filters:
            if self._columns is None:
                self._columns = document_columns(self._searched)
            allowed = matching_mask(filters, self._columns, len(self._searched))
        positions, scores = index.search(queries, top_k, allowed=allowed)  # (queries, top_k) each
        if scale_score:
            scores = 1 / (1 + np.exp(-scores / BM25_SCALING_FACTOR))
        return {
            "documents": [
                [
                    self._scored(position, score)
                    for position, score in zip(row_positions, row_scores, strict=True)
                    if position != NO_POSITION
                ]
                for row_positions, row_scores in zip(positions, scores, strict=True)
            ]
        }

    def _scored(self, position: int, score: float) -> ScoredDocument:
        doc = self._searched[position]
        return ScoredDocument(content=doc.content, id=doc.id, meta=dict(doc.meta), score=float(score))

    def _warm_index(self) -> BM25Index:
        if self._index is None:
            raise RuntimeError("The retriever is not warmed up: call warm_up() before run(), run_batch() or save().")
        return self._index

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the retriever: `{"type": ..., "init_parameters": {...}}` with every constructor parameter
        (the documents as `Document.to_dict()` dictionaries).
        """
        parameters = {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}
        if self.documents is not None:
            parameters["documents"] = [doc.to_dict() for doc in self.documents]
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "init_parameters": parameters}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BM25Retriever":
        """Rebuilds a retriever from `to_dict()`'s form."""
        parameters = dict(data.get("init_parameters", {}))
        if parameters.get("documents") is not None:
            parameters["documents"] = [Document.from_dict(doc) for doc in parameters["documents"]]
        return cls(**parameters)
