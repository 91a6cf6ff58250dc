"""
The dense part of an index: its passages' vectors embedded into `dense/` (`jobs.indexing.embed`'s actor pool) once
the BM25 index is saved, and its approximate index built (`jobs.indexing.ann`), each recorded in `build.json`'s
`dense` section.
"""

from typing import Any

from jobs.engines import Engine, InProcessEngine
from jobs.in_process import InProcessDataset
from jobs.indexing.documents import passage_tables
from jobs.indexing.record import BUILD_FILE, dense_format, write_dense_record
from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, read_json
from qa_core.retrieval.dense import FORMAT as DENSE_FORMAT


def add_dense_index(
    location: str, settings: RetrievalSettings, documents: str, engine: Engine, cluster: dict[str, Any]
) -> dict[str, Any]:
    """
    Embeds the passages of the complete BM25 index at `location` into its `dense/` shards and adds the `dense`
    section to its `build.json`, then, with `ann`, builds its approximate index and records it there too (`add_graph`):
    a build stopped in between leaves the vectors recorded and the approximate index to build.

    :returns: The `dense` section.
    """
    from jobs.indexing.embed import embed_index

    record = read_json(location, BUILD_FILE)
    dense = embed_index(
        _passages_dataset(documents, settings, engine), settings, location, record["documents"], engine, cluster
    )
    write_dense_record(location, dense)
    return add_graph(location, dense, settings, engine) if settings.ann is not None else dense


def add_graph(location: str, dense: dict[str, Any], settings: RetrievalSettings, engine: Engine) -> dict[str, Any]:
    """
    Builds the approximate index of the dense shards at `location` (`jobs.indexing.ann.build_ann`) where the engine runs
    work on a node (a Ray task holding a node's CPUs, or this process) and records it in `build.json`.

    :returns: The `dense` section with its `ann`.
    :raises InputError: Without FAISS, saying how to install it, or with too few passages for the kind.
    """
    from jobs.indexing.ann import build_ann
    from qa_core.retrieval.ann import check_size, require_faiss

    kind = settings.ann or dense["ann"]["kind"]  # asked for, or the recorded one whose file is missing
    try:
        require_faiss()
        check_size(kind, sum(shard["n"] for shard in dense["shards"]))
    except (ImportError, ValueError) as error:
        raise InputError(str(error)) from None
    dense = {**dense, "ann": engine.run_on_a_node(build_ann, location, dense, kind, settings.ann_search())}
    write_dense_record(location, dense)
    return dense


def _passages_dataset(documents: str, settings: RetrievalSettings, engine: Engine) -> Any:
    """The index's passages as the engine's dataset: `jobs.indexing.passages.indexed_passages` on Ray."""
    if isinstance(engine, InProcessEngine):
        return InProcessDataset(lambda: list(passage_tables(documents, settings)))
    from jobs.indexing.passages import indexed_passages

    return indexed_passages(documents, settings)


def model_fingerprint(settings: RetrievalSettings) -> str:
    """The embedding model's fingerprint (`qa_core.embedding`, imported only when asked: it loads torch)."""
    from qa_core.embedding import embedding_fingerprint

    return embedding_fingerprint(settings.embedding_model)


def complete_dense_part(
    location: str, record: dict[str, Any], settings: RetrievalSettings, documents: str, engine: Engine, cluster: dict
) -> dict[str, Any]:
    """
    The `dense` section of the index at `location` (build record `record`), complete: its passages embedded
    (`add_dense_index`) unless it holds their vectors by the run's embedding model in this version's format (kept
    from the run this one resumes), and its approximate index built where one is asked for or recorded but missing
    (`jobs.indexing.ann.needs_graph`; not into a given `--index`).
    """
    from jobs.indexing.ann import needs_graph

    dense = record.get("dense", {})
    if dense.get("fingerprint") != model_fingerprint(settings) or dense_format(location, dense) != DENSE_FORMAT:
        return add_dense_index(location, settings, documents, engine, cluster)
    if record.get("source") != "given" and needs_graph(location, dense, settings):
        return add_graph(location, dense, settings, engine)
    return dense
