"""
Retrieval, driver side: which questions need it, the BM25 index of the run (built once, or loaded from `--index`,
or kept from the run this one resumes), and the wave stage that hands it to a pool of retrieval actors.

An index folder is `qa_core.retrieval.BM25Index.save`'s (`.npy` arrays and JSON, never unpickled), or with
`index_shards` N > 1 one such folder per shard (`shard-00000/`, ...: `build_sharded`'s shards, which share the
corpus's statistics), plus `build.json`, written last: what it was built from (the documents' files and
fingerprint) and how (algorithm, parameters, shards, vocabulary size, build seconds, splitting). A run saves
its index as `_index/` in its output folder, so that a resumed run does not rebuild it; the retrieval actors
memory-map it from there. With `split_length` the index holds passages of the documents, and each shard folder
also holds `passages.json` (`workers.passages`): where each passage lies in its source document.

Building reads the documents' ids and contents into the driver (fine for corpora that fit in its memory, as
`build_sharded` needs them all; a distributed build is not done yet), splitting them batch by batch as they are
read when `split_length` is set.
"""

import hashlib
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from jobs.bulk_qa.engines import Engine
from jobs.bulk_qa.inputs import input_fingerprint
from jobs.bulk_qa.output import OutputFolder
from jobs.bulk_qa.workers.passages import Passages, split_batch
from jobs.bulk_qa.workers.retrieve import RetrievalSettings, RetrieveDocuments
from jobs.bulk_qa.workers.rows import wave_questions
from jobs.bulk_qa.workers.storage import InputError, parquet_dataset, redact, resolve_path
from qa_core.retrieval.corpus import update_fingerprint
from qa_core.retrieval.index import BM25Index
from qa_core.retrieval.index_io import HEADER_FILE
from qa_core.retrieval.sharding import build_sharded
from qa_core.retrieval.tokenizer import DEFAULT_TOKENIZATION_REGEX

INDEX_FOLDER = "_index"  # the run's index, inside its output folder
BUILD_FILE = "build.json"  # written last into an index folder: a folder without it is incomplete
# Questions one retrieval call searches for (one `BM25Index.search` call).
QUESTIONS_PER_RETRIEVAL_BATCH = 256
# The CPUs a retrieval actor reserves at most (less on a small cluster, so that tasks always find some)
RETRIEVAL_ACTOR_MAX_CPUS = 0.5
# Documents read per batch when building the index or fingerprinting the corpus.
_DOCUMENTS_PER_READ = 65536


@dataclass(frozen=True)
class BuiltIndex:
    """
    An index built in memory, not saved yet.

    :param shards: The shards, in corpus order.
    :param record: The build record (`build.json`).
    :param passages: With `split_length`, where the indexed passages lie in their documents, in corpus order.
    """

    shards: list[BM25Index]
    record: dict[str, Any]
    passages: Passages | None = None


@dataclass(frozen=True)
class IndexPlan:
    """
    The run's index: where the retrieval actors load it from and what the manifest says of it.

    :param location: The index folder (local path or URI).
    :param record: Documents, vocabulary size, build seconds, algorithm, parameters, splitting, fingerprint, and
        `source`: `built` (by this run), `resumed` (kept from the run this one resumes) or `given` (`--index`).
    :param built: An index this run built, not saved yet (`save_built_index` saves and drops it).
    """

    location: str
    record: dict[str, Any]
    built: BuiltIndex | None = None

    @property
    def shard_locations(self) -> list[str]:
        """The folder of each shard, in corpus order (the index folder itself when it has one shard)."""
        return shard_locations(self.location, self.record.get("shards", 1))


def shard_locations(location: str, shards: int) -> list[str]:
    """The shard folders of an index folder with `shards` shards."""
    if shards == 1:
        return [location]
    return [f"{location.rstrip('/')}/shard-{shard:05d}" for shard in range(shards)]


def needs_retrieval(questions_path: str, schema: pa.Schema) -> bool:
    """
    Whether any question lacks `document_ids`: the table has no such column (and no SQuAD `context`), or some
    rows hold null. Reads only the `document_ids` column.
    """
    if "document_ids" not in schema.names:
        return "context" not in schema.names
    return parquet_dataset(questions_path).count_rows(filter=pc.field("document_ids").is_null()) > 0


def prepare_index(settings: RetrievalSettings, documents: str, output: OutputFolder, resuming: bool) -> IndexPlan:
    """
    The run's index, before Ray starts: `--index` checked against the documents, or the index of the run this
    one resumes, or a new one built in memory (saved by `save_built_index` once the output folder is claimed).

    :raises InputError: For an `--index` built from other documents or with other settings, or documents that
        cannot be indexed (none with content, no terms, bad ids), naming the option or file.
    """
    if settings.index is not None:
        return IndexPlan(settings.index, {**check_given_index(settings, documents), "source": "given"})
    saved = f"{output.uri.rstrip('/')}/{INDEX_FOLDER}"
    if resuming:
        record = _read_json(saved, BUILD_FILE)
        if isinstance(record, dict):
            return IndexPlan(saved, {**_summary(record), "source": "resumed"})
    built = build_index(settings, documents)
    return IndexPlan(saved, {**_summary(built.record), "source": "built"}, built=built)


def save_built_index(plan: IndexPlan) -> IndexPlan:
    """Saves an index the run built into its output folder (`plan.location`) and drops it from the driver."""
    if plan.built is None:
        return plan
    write_index(plan.built, plan.location)
    return replace(plan, built=None)


def build_index(settings: RetrievalSettings, documents: str) -> BuiltIndex:
    """
    Builds the BM25 index of the documents that have content, in table order (documents without content are
    never retrieved and do not count in the corpus statistics, as in Haystack), or with `settings.split_length`
    of their passages, as `settings.index_shards` shards.

    :returns: The shards, the build record and the passages' sources.
    :raises InputError: If the documents cannot be indexed, naming the documents file.
    """
    started = time.time()
    ids: list[str] = []
    texts: list[str] = []
    passages: list[Passages] = []
    for batch_ids, batch_texts, batch_passages in _indexed_texts(documents, settings):
        ids += batch_ids
        texts += batch_texts
        passages += [batch_passages] if batch_passages is not None else []
    if len(texts) and settings.index_shards > len(texts):
        raise InputError(
            f"index_shards must be at most the {len(texts)} documents with content, not {settings.index_shards}."
        )
    try:
        shards = build_sharded(
            ids, texts, settings.index_shards if texts else 1, settings.bm25_algorithm,
            settings.parameters(), DEFAULT_TOKENIZATION_REGEX,
        )  # fmt: skip
    except ValueError as error:
        raise InputError(f"{redact(documents)}: cannot build the BM25 index of the documents: {error}") from None
    first = shards[0]
    vocabulary = set().union(*(shard.vocabulary for shard in shards)) if len(shards) > 1 else first.vocabulary
    record = {
        "documents": first.corpus.n_docs,
        "shards": len(shards),
        "vocabulary": len(vocabulary),
        "build_s": round(time.time() - started, 3),
        "algorithm": first.algorithm,
        "parameters": first.parameters,
        "tokenization_regex": first.tokenizer.regex,
        "fingerprint": first.corpus.fingerprint,
        "documents_files": input_fingerprint(documents),
        **_split_record(settings),
    }
    if settings.split_length is None:
        return BuiltIndex(shards, record)
    sources = Passages.concat(passages)
    record["source_documents"] = len(set(sources.source_ids))  # "documents" counts the passages
    return BuiltIndex(shards, record, sources)


def _split_record(settings: RetrievalSettings) -> dict[str, Any]:
    """How the documents were split for indexing, as the build record holds it."""
    return {"split_length": settings.split_length, "split_overlap": settings.split_overlap}


def write_index(built: BuiltIndex, location: str) -> None:
    """
    Writes an index folder (replacing one there): the shards (with their passages), then `build.json`. A local
    folder appears complete or not at all (written beside it, then renamed); a remote one is complete once
    `build.json` is there.
    """
    record = built.record
    filesystem, inner = resolve_path(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        target = Path(inner)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        _save_shards(built, partial)
        (partial / BUILD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        partial.rename(target)
        return
    with tempfile.TemporaryDirectory() as local:
        _save_shards(built, Path(local))
        if filesystem.get_file_info(inner).type != pafs.FileType.NotFound:
            filesystem.delete_dir(inner)
        pafs.copy_files(local, inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=filesystem)
    with filesystem.open_output_stream(f"{inner.rstrip('/')}/{BUILD_FILE}") as stream:
        stream.write(json.dumps(record, indent=2, sort_keys=True).encode("utf-8"))


def _save_shards(built: BuiltIndex, folder: Path) -> None:
    """Each shard into its folder, with the passages it holds when the documents were split."""
    shards = built.shards
    for shard, shard_folder in zip(shards, shard_locations(str(folder), len(shards)), strict=True):
        shard.save(shard_folder)
        if built.passages is not None:
            built.passages[shard.doc_offset : shard.doc_offset + len(shard.doc_ids)].save(Path(shard_folder))


def check_given_index(settings: RetrievalSettings, documents: str) -> dict[str, Any]:
    """
    Checks an `--index` folder against the run: built with the run's algorithm, parameters and splitting, and
    from `--documents`. Cheap when the documents' files are the ones it was built from (same paths, sizes and
    modification times, recorded in `build.json`); otherwise the documents are read once (and split) and
    fingerprinted (ids and contents, in order), which also accepts an unchanged copy.

    :returns: The index's build record.
    :raises InputError: If the folder is not a complete index, or was built otherwise or from other documents.
    """
    shown = redact(settings.index)
    record = _read_json(settings.index, BUILD_FILE)
    shards = record.get("shards", 1) if isinstance(record, dict) else 1
    header = _read_json(shard_locations(settings.index, shards)[0], HEADER_FILE)
    if not isinstance(record, dict) or not isinstance(header, dict):
        raise InputError(
            f"--index {shown}: not a complete index folder (no {BUILD_FILE} or {HEADER_FILE}); build one with "
            "`python -m jobs.index --documents D --output DIR`."
        )
    if header.get("tokenization_regex") != DEFAULT_TOKENIZATION_REGEX:
        raise InputError(
            f"--index {shown} was built with the tokenization regex {header.get('tokenization_regex')!r}, not "
            f"this version's {DEFAULT_TOKENIZATION_REGEX!r}: rebuild it with `python -m jobs.index`."
        )
    built_with = (header.get("algorithm"), header.get("parameters"))
    wanted = (settings.bm25_algorithm, settings.parameters())
    if built_with != wanted:
        raise InputError(
            f"--index {shown} was built with {built_with[0]} {built_with[1]}, not this run's bm25_algorithm "
            f"{wanted[0]} and bm25_parameters {wanted[1]}: rebuild it or pass the settings it was built with."
        )
    split = {"split_length": record.get("split_length"), "split_overlap": record.get("split_overlap", 0)}
    if split != _split_record(settings):
        built_split = ", ".join(f"{key} {value}" for key, value in split.items())
        raise InputError(
            f"--index {shown} was built with {built_split}, not this run's split_length {settings.split_length} "
            f"and split_overlap {settings.split_overlap}: rebuild it or pass the settings it was built with."
        )
    if header.get("doc_offset") != 0 or header.get("corpus", {}).get("n_docs") != record.get("documents"):
        raise InputError(f"--index {shown}: its first shard's corpus does not match its {BUILD_FILE}.")
    if record.get("documents_files") != input_fingerprint(documents):
        digest = hashlib.sha256()
        for batch_ids, batch_texts, _ in _indexed_texts(documents, settings):
            update_fingerprint(digest, batch_ids, batch_texts)
        if digest.hexdigest() != header.get("corpus", {}).get("fingerprint"):
            raise InputError(
                f"--index {shown} was built from other documents than --documents {redact(documents)} (their ids "
                "and contents differ from the index's fingerprint): rebuild it with `python -m jobs.index`."
            )
    return _summary(record)


def retrieved_questions(
    questions: Any,
    wave: dict[str, Any],
    settings: RetrievalSettings,
    plan: IndexPlan,
    cluster_cpus: float,
    engine: Engine,
) -> Any:
    """
    The wave's questions, those without `document_ids` given their retrieved documents (see
    `workers.retrieve.RetrieveDocuments`), materialized: both the explode and the question stages read them.
    Each shard of the index is memory-mapped by a retrieval actor of its own, the shards' stages chained (each
    merges its hits into the earlier shards'); like the reader actors, the actors reserve a fraction of a CPU,
    together at most a quarter of the cluster's, so that the tasks around them always find CPUs.
    """
    locations = plan.shard_locations
    retrieved = questions.map_batches(wave_questions, batch_format="pyarrow", fn_kwargs=wave, num_cpus=engine.task_cpus)
    for location in locations:
        retrieved = retrieved.map_batches(
            RetrieveDocuments,
            batch_format="pyarrow",
            batch_size=QUESTIONS_PER_RETRIEVAL_BATCH,
            compute=engine.actor_pool(1),
            fn_constructor_kwargs={"location": location, "retriever_top_k": settings.retriever_top_k},
            num_cpus=min(RETRIEVAL_ACTOR_MAX_CPUS, (cluster_cpus or 1) / (4 * len(locations))),
        )
    return retrieved.materialize()


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    """A build record as the manifest shows it (without the documents' files and the default tokenization regex)."""
    return {key: value for key, value in record.items() if key not in ("documents_files", "tokenization_regex")}


def _documents_with_content(documents: str) -> Iterator[tuple[list[str], list[str]]]:
    """The documents' ids and contents, batch by batch in table order, skipping documents without content."""
    scanner = parquet_dataset(documents).scanner(
        columns=["id", "content"], filter=pc.field("content").is_valid(), batch_size=_DOCUMENTS_PER_READ
    )
    for batch in scanner.to_batches():
        yield batch.column("id").to_pylist(), batch.column("content").to_pylist()


def _indexed_texts(documents: str, settings: RetrievalSettings) -> Iterator[tuple[list[str], list[str], Any]]:
    """
    What the index holds, batch by batch in table order: the documents with content (ids, texts, None), or with
    `split_length` their passages (ids, texts, and where they lie in their documents).
    """
    for ids, texts in _documents_with_content(documents):
        if settings.split_length is None:
            yield ids, texts, None
        else:
            yield split_batch(ids, texts, settings.split_length, settings.split_overlap)


def _read_json(location: str, name: str) -> Any | None:
    """A JSON file of a folder on any filesystem; None when it does not exist or is not valid JSON."""
    filesystem, inner = resolve_path(location)
    try:
        with filesystem.open_input_stream(f"{inner.rstrip('/')}/{name}") as stream:
            return json.loads(stream.read().decode("utf-8"))
    except (FileNotFoundError, ValueError):
        return None
