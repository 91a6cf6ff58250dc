"""
The BM25 weight of a posting, `idf(term) * tfc(count, document length)`, computed when a search needs it from the
term count and document length the index stores (a byte or two each) rather than read from stored float64
weights (eight bytes each): the same operations on the same numbers as weighing the whole corpus at once
(`scoring`), so the same bits.
"""

import numpy as np

from qa_core.retrieval.scoring import term_frequency_components

# The tfc are looked up in a table of the index's (term count, document length) pairs when it has at most this share
# of its postings' number of entries and at most `_TFC_TABLE_ENTRIES` (passages: 29 counts by 101 lengths for 16M
# postings); else computed posting by posting.
_TFC_TABLE_SHARE = 1 / 16
_TFC_TABLE_ENTRIES = 1 << 20


class PairWeights:
    """
    The weights of an index's postings.

    :param algorithm: One of `scoring.ALGORITHMS`.
    :param parameters: Its parameters (`scoring.resolve_parameters`).
    :param avg_doc_len: The corpus's `avgdl`.
    :param idf: `(terms,)` float64 each term's idf in the corpus.
    :param doc_indices: `(pairs,)` each posting's document.
    :param term_counts: `(pairs,)` each posting's term count (at least 1).
    :param doc_lengths: `(documents,)` each document's length.
    """

    def __init__(
        self,
        algorithm: str,
        parameters: dict[str, float],
        avg_doc_len: float,
        idf: np.ndarray,
        doc_indices: np.ndarray,
        term_counts: np.ndarray,
        doc_lengths: np.ndarray,
    ) -> None:
        # np.asarray drops np.memmap's subclass, whose Python-level indexing costs more than these small lookups.
        self.idf = np.asarray(idf)
        self.doc_indices = np.asarray(doc_indices)
        self.term_counts = np.asarray(term_counts)
        self.doc_lengths = np.asarray(doc_lengths)
        self.algorithm, self.parameters, self.avg_doc_len = algorithm, parameters, avg_doc_len
        self._table, self._columns = self._tfc_table()

    def weights(self, term_id: int, places: slice | np.ndarray) -> np.ndarray:
        """`(postings,)` float64 the weights of a term's postings at these places of the posting arrays."""
        return self.idf[term_id] * self.tfc(places)

    def tfc(self, places: slice | np.ndarray) -> np.ndarray:
        """`(postings,)` float64 the tfc of the postings at these places of the posting arrays."""
        docs = self.doc_indices[places]
        if self._table is None:
            counts, lengths = self.term_counts[places], self.doc_lengths[docs]
            return term_frequency_components(self.algorithm, self.parameters, counts, lengths, self.avg_doc_len)
        entries = self.term_counts[places].astype(np.int64)  # (count - 1) * lengths + the document's column
        entries -= 1
        entries *= self._table.shape[1]
        entries += self._columns[docs]
        return self._table.ravel()[entries]

    def _tfc_table(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """
        The tfc of every (term count, document length) the postings can hold, to look up rather than compute per
        posting: `(counts, lengths)` float64, row `c - 1` for a count of `c`, and `(documents,)` each document's
        column; `(None, None)` where the table would be too large (`_TFC_TABLE_SHARE`, `_TFC_TABLE_ENTRIES`).
        """
        lengths, columns = np.unique(self.doc_lengths, return_inverse=True)
        rows = int(np.max(self.term_counts, initial=0))
        if rows * lengths.size > min(_TFC_TABLE_SHARE * self.term_counts.size, _TFC_TABLE_ENTRIES):
            return None, None
        counts, pair_lengths = np.repeat(np.arange(1, rows + 1), lengths.size), np.tile(lengths, rows)
        table = term_frequency_components(self.algorithm, self.parameters, counts, pair_lengths, self.avg_doc_len)
        return table.reshape(rows, lengths.size), columns.astype(np.min_scalar_type(max(1, lengths.size - 1)))
