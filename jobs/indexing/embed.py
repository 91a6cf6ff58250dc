"""
The dense vectors of an index, built by a Ray Data actor pool: each actor loads the embedding model once (on the GPU
Ray assigned it, else the CPU), embeds batches of passages in length-sorted token-budget batches
(`qa_core.embedding.SentenceEmbedder`) and writes each run of contiguous corpus positions as a dense shard
`dense/shard-<first position>/` of the index folder (`qa_core.retrieval.dense.DenseIndex.save`). A shard already
there with the same passage ids, model fingerprint and similarity is kept, so that a resumed run embeds only what
is missing.
"""

import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from jobs.retrieval_settings import RetrievalSettings
from jobs.storage import InputError, redact, resolve_path, written_in_place
from qa_core.embedding import EmbeddingModelConfig, SentenceEmbedder, embedding_fingerprint, resolve_model_folder
from qa_core.retrieval.dense import DENSE_HEADER_FILE, VECTORS_FILE, DenseIndex, read_dense_header
from qa_core.retrieval.index_io import read_doc_ids

DENSE_FOLDER = "dense"  # the dense shards' folder inside an index folder
PASSAGES_PER_SHARD = 8192  # passages an actor embeds per batch, written as one shard
# What each embedding batch returns: one row per shard it wrote or kept, and how many of a written shard's vectors
# it took from an earlier index rather than embedding them (an update: `EmbedPassages`' `earlier`).
SHARD_SCHEMA = pa.schema(
    [("folder", pa.string()), ("doc_offset", pa.int64()), ("n", pa.int64()), ("embedded", pa.bool_()),
     ("reused", pa.int64())]
)  # fmt: skip


def shard_folder_name(doc_offset: int) -> str:
    """A dense shard's folder, relative to the index folder."""
    return f"{DENSE_FOLDER}/shard-{doc_offset:012d}"


class EmbedPassages:
    """
    Embeds batches of passages (`position`, `id`, `content`) and writes them as dense shards of the index at
    `location`. With `earlier` (an update), a batch's `earlier` column gives each passage's position in an earlier
    version of the index (-1: none holds it with its text), whose vector is taken from there, not embedded again.
    """

    def __init__(
        self,
        location: str,
        model: str,
        precision: str,
        similarity: str,
        fingerprint: str,
        cpu_threads: int,
        device: str | None = None,
        earlier: list[dict[str, Any]] | None = None,
    ) -> None:
        """
        :param location: The index folder (local path or URI).
        :param model: The sentence-transformers model (folder or hub id).
        :param precision: fp32, bf16 or auto.
        :param similarity: dot_product or cosine, recorded in the shards.
        :param fingerprint: The model's (`embedding_fingerprint`), recorded in and checked against the shards.
        :param cpu_threads: torch's threads when the actor has no GPU.
        :param device: Where the model runs; None: the GPU Ray assigned this actor, else the CPU.
        :param earlier: The dense shards of an earlier version of the index (`location`, the folder of each,
            `doc_offset` and `n`), where the vectors of the passages an update keeps are read.
        """
        import torch

        if device is None:  # a Ray actor: the GPU Ray assigned it, else the CPU
            import ray

            device = "cuda:0" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"
        if device == "cpu":
            torch.set_num_threads(max(1, cpu_threads))
        self.embedder = SentenceEmbedder(model, precision=precision, device=device)
        self.embedder.warm_up()
        self.location = location
        self.record = {"model": model, "fingerprint": fingerprint}
        self.similarity = similarity
        self.earlier = EarlierVectors(earlier or [])

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Passages -> `SHARD_SCHEMA` rows, one per run of contiguous positions."""
        batch = batch.sort_by("position")
        positions = batch["position"].to_numpy()
        bounds = [0, *(np.flatnonzero(np.diff(positions) != 1) + 1).tolist(), len(positions)]
        rows = []
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            ids = batch["id"].slice(start, stop - start).to_pylist()
            offset = int(positions[start])
            folder = f"{self.location.rstrip('/')}/{shard_folder_name(offset)}"
            kept, reused = self._kept(folder, ids), 0
            if not kept:
                texts = batch["content"].slice(start, stop - start).to_pylist()
                earlier = (batch["earlier"].slice(start, stop - start).to_numpy() if "earlier" in batch.column_names
                           else np.full(len(ids), -1))  # fmt: skip
                vectors, reused = self._vectors(ids, texts, earlier)
                _write_shard(DenseIndex(ids, vectors, offset, self.similarity), folder, self.record)
            rows.append({"folder": shard_folder_name(offset), "doc_offset": offset, "n": len(ids), "embedded": not kept,
                         "reused": reused})  # fmt: skip
        return pa.Table.from_pylist(rows, schema=SHARD_SCHEMA)

    def _vectors(self, ids: list[str], texts: list[str], earlier: np.ndarray) -> tuple[np.ndarray, int]:
        """The passages' vectors: embedded, or read where an earlier version holds them (`earlier` >= 0)."""
        held = np.flatnonzero(earlier >= 0)
        if not held.size:
            return self.embedder.embed(texts, names=ids), 0
        taken = self.earlier(earlier[held])
        vectors = np.empty((len(ids), taken.shape[1]), np.float32)
        vectors[held] = taken
        fresh = np.flatnonzero(earlier < 0).tolist()
        if fresh:
            vectors[fresh] = self.embedder.embed([texts[at] for at in fresh], names=[ids[at] for at in fresh])
        return vectors, int(held.size)

    def _kept(self, folder: str, ids: list[str]) -> bool:
        """Whether the shard at `folder` already holds these passages' vectors, by this model and similarity."""
        filesystem, inner = resolve_path(folder)
        if filesystem.get_file_info(f"{inner}/{DENSE_HEADER_FILE}").type == pafs.FileType.NotFound:
            return False
        if not isinstance(filesystem, pafs.LocalFileSystem):
            return False  # a remote shard is rewritten rather than read back
        try:
            header, kept = read_dense_header(inner), read_doc_ids(Path(inner))
        except ValueError:
            return False
        same = (header.get("fingerprint"), header.get("similarity")) == (self.record["fingerprint"], self.similarity)
        return same and kept == ids


class EarlierVectors:
    """
    The vectors of an earlier version of an index, read by corpus position from its dense shards (each shard read
    once: memory-mapped where it is local, whole from object storage).

    :param shards: The dense shards: `location` (the version's folder), `folder`, `doc_offset` and `n` of each.
    """

    def __init__(self, shards: list[dict[str, Any]]) -> None:
        self.shards = sorted(shards, key=lambda shard: shard["doc_offset"])
        self._read: dict[int, np.ndarray] = {}  # each shard's vectors, once read

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """`(len(positions), dimension)` float32: the vectors at these positions of the earlier corpus."""
        offsets = np.array([shard["doc_offset"] for shard in self.shards])
        shard_of = np.searchsorted(offsets, positions, side="right") - 1
        vectors = None
        for at in np.unique(shard_of).tolist():
            if at not in self._read:
                shard = self.shards[at]
                self._read[at] = _read_vectors(f"{shard['location'].rstrip('/')}/{shard['folder']}")
            rows = self._read[at][positions[shard_of == at] - offsets[at]]
            if vectors is None:
                vectors = np.empty((positions.size, rows.shape[1]), np.float32)
            vectors[shard_of == at] = rows
        return vectors


def _read_vectors(folder: str) -> np.ndarray:
    """A dense shard's vectors: memory-mapped where it is local, read whole from object storage."""
    filesystem, inner = resolve_path(folder)
    if isinstance(filesystem, pafs.LocalFileSystem):
        return DenseIndex.load(inner, mmap=True).vectors
    with filesystem.open_input_file(f"{inner.rstrip('/')}/{VECTORS_FILE}") as file:
        return np.load(file, allow_pickle=False)


def _write_shard(index: DenseIndex, folder: str, record: dict[str, Any]) -> None:
    """Writes a dense shard, complete or not at all (`written_in_place`)."""
    with written_in_place(folder) as staged:
        index.save(staged.path, record)


def embed_index(
    passages: Any, settings: RetrievalSettings, location: str, passages_count: int, engine: Any, cluster: dict
) -> dict[str, Any]:
    """
    Embeds the passages of an index into dense shards in its folder (`embed_passages`).

    :param passages: The passages (`position`, `id`, `content`), a Ray Dataset or the in-process engine's dataset.
    :param passages_count: How many there are (the index's `documents`): the shards must cover them all.
    :param engine: The run's engine (`actor_pool`).
    :param cluster: `cpus` and `gpus` of where it runs.
    :returns: The build record's `dense` section.
    :raises InputError: If the model folder lacks its sentence-transformers configuration.
    """
    started = time.time()
    return dense_section(settings, embed_passages(passages, settings, location, engine, cluster), passages_count,
                         started)  # fmt: skip


def embed_passages(
    passages: Any,
    settings: RetrievalSettings,
    location: str,
    engine: Any,
    cluster: dict,
    earlier: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """
    Embeds passages into dense shards of the index at `location`, in an actor pool (one actor per GPU, else one
    actor with a fraction of a CPU reserved and the machine's threads).

    :param passages: The passages (`position`, `id`, `content`, and with `earlier` their `earlier` positions), a
        Ray Dataset or the in-process engine's dataset.
    :param earlier: As `EmbedPassages`' (an update: the vectors it keeps are read, not embedded).
    :returns: The shards written or kept (`SHARD_SCHEMA` rows), in corpus order.
    :raises InputError: If the model folder lacks its sentence-transformers configuration.
    """
    model = settings.embedding_model
    model_config(model)
    gpus, cpus = cluster.get("gpus") or 0, cluster.get("cpus") or 1
    actors = max(1, int(gpus)) if gpus else 1
    written = passages.map_batches(
        EmbedPassages,
        batch_format="pyarrow",
        batch_size=PASSAGES_PER_SHARD,
        compute=engine.actor_pool(actors),
        fn_constructor_kwargs={
            "location": location,
            "model": model,
            "precision": settings.embedding_precision,
            "similarity": settings.embedding_similarity,
            "fingerprint": embedding_fingerprint(model),
            "cpu_threads": int(cpus),
            "device": engine.reader_device(),
            "earlier": earlier,
        },
        num_cpus=min(0.5, cpus / 4),
        num_gpus=1 if gpus else None,
    )
    return sorted(written.iter_rows(), key=lambda row: row["doc_offset"])


def model_config(model: str) -> EmbeddingModelConfig:
    """
    The embedding model's sentence-transformers configuration.

    :raises InputError: If the model folder lacks it.
    """
    try:
        return EmbeddingModelConfig.read(resolve_model_folder(model))
    except ValueError as error:
        raise InputError(f"--embedding-model {redact(model)}: {error}") from None


def dense_section(
    settings: RetrievalSettings, shards: list[dict[str, Any]], passages_count: int, started: float
) -> dict[str, Any]:
    """
    The build record's `dense` section of an index of `passages_count` passages whose vectors lie in these dense
    shards (`SHARD_SCHEMA` rows, `embedded` whether written now), which must cover them all, in corpus order.
    """
    covered = 0
    for shard in shards:
        if shard["doc_offset"] != covered:
            raise RuntimeError(f"The dense shards do not cover corpus positions {covered} to {shard['doc_offset']}.")
        covered += shard["n"]
    if covered != passages_count:
        raise RuntimeError(f"The dense shards hold {covered} vectors for an index of {passages_count} passages.")
    config = model_config(settings.embedding_model)
    return {
        "model": settings.embedding_model,
        "fingerprint": embedding_fingerprint(settings.embedding_model),
        "dimension": config.dimension,
        "pooling": config.pooling,
        "normalize": config.normalize,
        "similarity": settings.embedding_similarity,
        "precision": settings.embedding_precision,
        "shards": [{"folder": row["folder"], "doc_offset": row["doc_offset"], "n": row["n"]} for row in shards],
        "embedded": sum(row["n"] - row["reused"] for row in shards if row["embedded"]),
        "build_s": round(time.time() - started, 3),
    }
