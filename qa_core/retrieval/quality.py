"""
Retrieval quality against gold: each question's relevant documents, compared by id with what it retrieved, as
Haystack's `DocumentRecallEvaluator` (single hit and multi hit) and `DocumentMRREvaluator` score them with
`document_comparison_field="id"`; recall at several cut-offs.
"""

from collections.abc import Mapping, Sequence

DEFAULT_CUTOFFS = (1, 3, 5, 10)


def retrieval_quality(
    retrieved: Mapping[str, Sequence[str]],
    relevant: Mapping[str, Sequence[str]],
    cutoffs: Sequence[int] = DEFAULT_CUTOFFS,
) -> dict[str, float | int]:
    """
    Recall and MRR over the questions that have both relevant documents and a retrieval.

    Usage example:
    ```python
    quality = retrieval_quality({"q": ["b", "a"]}, {"q": ["a"]}, cutoffs=(1, 2))
    assert (quality["recall@1"], quality["recall@2"], quality["mrr"]) == (0.0, 1.0, 0.5)
    ```

    :param retrieved: Each question's retrieved document ids, best first (a document may repeat when passages of
        it were retrieved: its rank is its first passage's).
    :param relevant: Each question's relevant document ids.
    :param cutoffs: The k of each `recall@k`.
    :returns: `questions` (how many were scored), `recall@k` (the share with a relevant document among the first
        k: DocumentRecallEvaluator's single hit), `multi_hit_recall@k` (the mean share of a question's relevant
        documents among its first k: its multi hit), `mrr` (the mean reciprocal rank of the first relevant
        document, 0 when none was retrieved: DocumentMRREvaluator's) and `recall` / `multi_hit_recall` over all
        that was retrieved.
    """
    scored = [question for question in retrieved if relevant.get(question)]
    quality: dict[str, float | int] = {"questions": len(scored)}
    if not scored:
        return quality
    for k in (*cutoffs, None):
        suffix = "" if k is None else f"@{k}"
        single, multi = [], []
        for question in scored:
            gold, found = set(relevant[question]), set(retrieved[question][:k])
            single.append(float(bool(gold & found)))
            multi.append(len(gold & found) / len(gold))
        quality[f"recall{suffix}"] = sum(single) / len(scored)
        quality[f"multi_hit_recall{suffix}"] = sum(multi) / len(scored)
    reciprocal = []
    for question in scored:
        gold = set(relevant[question])
        rank = next((rank for rank, doc_id in enumerate(retrieved[question], 1) if doc_id in gold), None)
        reciprocal.append(0.0 if rank is None else 1 / rank)
    quality["mrr"] = sum(reciprocal) / len(scored)
    return quality
