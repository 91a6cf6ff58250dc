"""Term counting: a corpus turned into a vocabulary, a (documents, terms) term-frequency matrix and lengths."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, islice

import numpy as np
import scipy.sparse as sp

from qa_core.retrieval.tokenizer import Tokenizer

# Documents tokenized per step: bounds the Python strings alive at once (about 100 per passage).
_CHUNK_DOCS = 8192


@dataclass
class TermCounts:
    """
    How often each term occurs in each document.

    :param vocabulary: The terms, by term id.
    :param frequencies: `(documents, terms)` CSR matrix of int32 counts; a row holds only the terms its document has.
    :param doc_lengths: Terms per document, repeats included (Haystack's `doc_len`).
    """

    vocabulary: list[str]
    frequencies: sp.csr_matrix
    doc_lengths: np.ndarray


class TermIds(dict):
    """A vocabulary that gives an unseen term the next id when it is looked up."""

    def __missing__(self, term: str) -> int:
        term_id = self[term] = len(self)
        return term_id


def count_terms(texts: Iterable[str], tokenizer: Tokenizer) -> TermCounts:
    """
    Tokenizes the texts and counts their terms.

    :param texts: The document texts, in corpus order.
    :param tokenizer: Splits a text into terms.
    :returns: The vocabulary (terms numbered in order of first occurrence), frequencies and lengths.
    """
    term_ids = TermIds()
    blocks, lengths = [], []
    iterator = iter(texts)
    while chunk := list(islice(iterator, _CHUNK_DOCS)):
        tokens = [tokenizer.tokenize(text) for text in chunk]
        chunk_lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
        ids = np.fromiter(map(term_ids.__getitem__, chain.from_iterable(tokens)), np.int32, int(chunk_lengths.sum()))
        rows = np.repeat(np.arange(len(chunk), dtype=np.int32), chunk_lengths)
        block = sp.coo_matrix((np.ones(ids.size, np.int32), (rows, ids)), shape=(len(chunk), len(term_ids)))
        blocks.append(block.tocsr())  # sums the repeats of a term in a document
        lengths.append(chunk_lengths)
    frequencies = _stack_rows(blocks, n_terms=len(term_ids))
    doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    return TermCounts(vocabulary=list(term_ids), frequencies=frequencies, doc_lengths=doc_lengths)


def _stack_rows(blocks: Sequence[sp.csr_matrix], n_terms: int) -> sp.csr_matrix:
    """Stacks CSR blocks whose column counts grew with the vocabulary into one `(documents, n_terms)` matrix."""
    if not blocks:
        return sp.csr_matrix((0, n_terms), dtype=np.int32)
    offsets = np.cumsum([0] + [block.nnz for block in blocks[:-1]])
    indptr = np.concatenate(
        [[0]] + [block.indptr[1:].astype(np.int64) + offset for block, offset in zip(blocks, offsets, strict=True)]
    )
    indices = np.concatenate([block.indices for block in blocks]).astype(np.int32, copy=False)
    data = np.concatenate([block.data for block in blocks]).astype(np.int32, copy=False)
    return sp.csr_matrix((data, indices, indptr), shape=(int(indptr.size - 1), n_terms))
