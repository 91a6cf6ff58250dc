"""
The passages an index holds, as a Ray Dataset: `position` (the corpus position, 0..N-1 in table order), `id` and
`content`, documents with content only, split into passages with `split_length`.

A stand-in read in the driver (`jobs.bulk_qa.retrieval.passage_tables`) until the distributed build reads and
splits them in tasks; the dense index relies on the columns `position`, `id` and `content` only.
"""

from typing import Any

from jobs.bulk_qa.workers.retrieve import RetrievalSettings


def indexed_passages(documents: str, settings: RetrievalSettings) -> Any:
    """The passages of the index of `documents` under `settings`, in corpus order (a `ray.data.Dataset`)."""
    import ray.data

    from jobs.bulk_qa.retrieval import passage_tables

    return ray.data.from_arrow(list(passage_tables(documents, settings)))
