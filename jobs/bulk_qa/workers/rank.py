"""
The ranking stage (`--ranker`), one instance per Ray actor (in-process: one in the driver), between the fetch of
the retrieved documents' texts (`workers.fetch`) and the pairs: each retrieved question's documents reranked by a
cross-encoder (`qa_core.ranker.CrossEncoderRanker`, Haystack's `SentenceTransformersSimilarityRanker`), the
best `ranker_top_k` kept in the ranker's order, with their scores (`ranker_scores`). All the batch's questions'
(query, document) pairs share length-sorted forward passes.

A document is ranked as Haystack's pipeline ranks what its retriever returns: a retrieved passage (`split_length`)
by its own text (its range of the source document the store holds), with its id, a whole document by its text;
`page_number` and `file_path` are its meta (`ranker_meta_fields_to_embed`). Questions that name their
`document_ids` are not ranked: the reader reads the documents they name, as without a ranker.
"""

from typing import Any

import pyarrow as pa

from jobs.bulk_qa.workers.fetch import FETCHED_COLUMNS, KNOWN_COLUMN
from jobs.ranker_settings import RankingSettings
from jobs.retrieval.retrieve import HIT_COLUMNS, RANKER_FIELD, RETRIEVER_FIELDS
from qa_core.ranker import CrossEncoderRanker
from qa_core.retrieval.scored_document import ScoredDocument
from qa_core.secret import Secret

# The columns that hold one value per hit of a question, in the hits' order: what ranking reorders and cuts.
PER_HIT_COLUMNS = (
    *HIT_COLUMNS, "retrieval_scores", "retrieved_positions", *(field.name for field in RETRIEVER_FIELDS),
    *FETCHED_COLUMNS, KNOWN_COLUMN,
)  # fmt: skip


class RankDocuments:
    """Holds one warmed `CrossEncoderRanker` on the actor's GPU (or the CPU) and reranks each batch's questions."""

    def __init__(
        self, ranking: RankingSettings, token: Secret | None, cpu_threads: int | None = None, device: str | None = None
    ) -> None:
        """
        :param ranking: The ranker and its settings (`ranking.ranker` set).
        :param token: The hub token, for a hub id.
        :param cpu_threads: Torch threads on a CPU.
        :param device: Where the ranker runs; None: the GPU Ray assigned to this actor, or the CPU without one.
        """
        import torch

        if device is None:
            import ray

            device = "cuda:0" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"
        if device == "cpu" and cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.ranker = CrossEncoderRanker.from_settings(
            str(ranking.ranker), ranking.component_settings(), device=device, precision=ranking.ranker_precision
        )
        self.ranker.warm_up()

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Questions with their fetched documents -> the same, each retrieved question's hits reranked and cut."""
        return rank_questions(batch, self.ranker)


def rank_questions(batch: pa.Table, ranker: CrossEncoderRanker) -> pa.Table:
    """
    The batch's retrieved questions (`retrieved_positions` set) with their hits in the ranker's order, cut to its
    `top_k` and `score_threshold`, every per-hit column (`PER_HIT_COLUMNS`) reordered alike, and `ranker_scores`;
    the other questions as they were (`ranker_scores` null).
    """
    columns = {name: batch[name].to_pylist() for name in PER_HIT_COLUMNS if name in batch.column_names}
    asked = [row for row, positions in enumerate(columns["retrieved_positions"]) if positions is not None]
    documents = [hit_documents(columns, row) for row in asked]
    queries = batch["query"].to_pylist()
    ranked = ranker.run_batch([queries[row] for row in asked], documents)["documents"]
    scores: list[list[float] | None] = [None] * len(batch)
    for row, hits, kept in zip(asked, documents, ranked, strict=True):
        place = {hit.id: index for index, hit in enumerate(hits)}
        order = [place[document.id] for document in kept]
        for values in columns.values():
            if values[row] is not None:
                values[row] = [values[row][index] for index in order]
        scores[row] = [document.score for document in kept]
    for name, values in columns.items():
        batch = batch.set_column(batch.schema.get_field_index(name), name, pa.array(values, batch[name].type))
    return batch.append_column(RANKER_FIELD, pa.array(scores, RANKER_FIELD.type))


def hit_documents(columns: dict[str, list], row: int) -> list[ScoredDocument]:
    """
    A retrieved question's hits as the ranker reads them: a passage by its id and its range of its document's text,
    a whole document by its id and text; its page number and file as meta, its retrieval score as score.
    """
    value = {name: values[row] for name, values in columns.items()}
    documents = []
    for index, document_id in enumerate(value["document_ids"]):
        content = value["passage_contents"][index]
        hit_id = document_id
        if value.get("passage_ids") is not None:
            hit_id = value["passage_ids"][index]
            start, end = value["passage_starts"][index], value["passage_ends"][index]
            content = None if content is None else content[start:end]
        meta: dict[str, Any] = {}
        for name, (key, _) in FETCHED_COLUMNS.items():
            if key != "content" and value[name][index] is not None:
                meta[key] = value[name][index]
        documents.append(ScoredDocument(content=content, id=hit_id, meta=meta, score=value["retrieval_scores"][index]))
    return documents
