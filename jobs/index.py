"""
Builds the BM25 index of a documents table once, for bulk QA runs to share (`python -m jobs.bulk_qa ... --index DIR`):

    python -m jobs.index --documents D --output DIR [--bm25-algorithm BM25L] [--bm25-parameters '{k1: 1.2}'] \
        [--index-shards N | --index-shard-size PASSAGES | --memory-budget GIB] \
        [--split-length WORDS] [--split-overlap WORDS] \
        [--retrieval dense|hybrid --embedding-model MODEL [--embedding-similarity cosine]] \
        [--embedding-precision bf16] [--ann hnsw|ivf] [--filter-fields '[year, author]'] [--address RAY]

Or grows an index it built with more documents, as new shards, without reading its documents again:

    python -m jobs.index --add DOCS --index DIR [--address RAY]

Or brings an index to the documents of a table: new documents added, changed ones replaced, missing ones deleted,
only the shards that changed written again, as a new version of the index switched to at the end
(`jobs.indexing.update`; its searches then equal those of a fresh build of the table):

    python -m jobs.index --update DOCS --index DIR [--memory-budget GIB] [--address RAY]

The index is built by Ray Data (`jobs.indexing.build.build_index_with_ray`), on its own local Ray or the
cluster `--address` names: memory per task is set by the shard size, the driver holds the corpus statistics only.
Without `--index-shards` or `--index-shard-size` the shard size is chosen so that a node's build tasks at once stay
within `--memory-budget` GiB (default: a quarter of the node's memory; `jobs.indexing.memory`); the shards and the
budget are printed and recorded in `build.json`.
DIR receives the index (`.npy` arrays, Arrow and JSON files, memory-mapped, never unpickled) and `build.json`: the
documents' files and fingerprint, the algorithm and parameters, the splitting, the vocabulary size, the build time
and the metadata fields kept for filters (`filter_fields`: `--filter-fields`, by default every scalar metadata field
of the documents; each shard holds their values in `filter_fields.arrow`). With `--retrieval dense` or `hybrid` the
passages' vectors are embedded too, by a Ray Data actor pool (on the cluster at `RAY_ADDRESS`, else a Ray of its own
on this machine), into `DIR/dense/`, and `build.json` gains a `dense` section (model, fingerprint, dimension,
pooling, shards); the BM25 index is built either way (it holds where each passage lies). A run given `--index DIR`
refuses it unless its `--documents`, `--bm25-algorithm`, `--bm25-parameters`, `--split-length` and `--split-overlap`
are the ones it was built with, and, for dense or hybrid retrieval, its `--embedding-model`. Exit status: 0 when
built, 2 for unusable input or options.
"""

import argparse
import sys

import pyarrow.fs as pafs

from jobs.engines import RayEngine
from jobs.indexing.build import build_index_with_ray
from jobs.indexing.filter_fields import FILTER_FIELDS_KEY, add_filter_fields, chosen_fields
from jobs.indexing.grow import add_documents_with_ray
from jobs.indexing.record import BUILD_FILE
from jobs.indexing.update import check_update, update_index_with_ray
from jobs.indexing.versions import VERSION_FILE, current_version
from jobs.indexing.vectors import add_dense_index
from jobs.options import add_options, with_values
from jobs.ray_logs import RayLogFilter
from jobs.ray_start import start_engine
from jobs.retrieval_settings import RetrievalSettings
from jobs.run_settings import RunSettings
from jobs.shared_paths import SharedPath, model_folder
from jobs.storage import InputError, redact, resolve_path
from jobs.tables import DOCUMENTS, table_schema
from qa_core.retrieval.index_io import HEADER_FILE

# The retrieval settings an index is built with (the job's others only apply to searching it).
INDEX_OPTIONS = frozenset(
    {
        "bm25_algorithm", "bm25_parameters", "index_shards", "index_shard_size", "memory_budget", "split_length",
        "split_overlap",
        "retrieval", "embedding_model", "embedding_similarity", "embedding_precision", "ann", "filter_fields",
    }
)  # fmt: skip
# Where the build runs (the job's options of the same names).
RUN_OPTIONS = frozenset({"address", "verbose"})


def build_parser() -> argparse.ArgumentParser:
    """The command line: the BM25 options are `RetrievalSettings`' fields, as the job's."""
    parser = argparse.ArgumentParser(prog="python -m jobs.index", description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--documents", help="documents Parquet: id, content (as for the job)")
    parser.add_argument("--output", help="folder to write the index into (an index there is replaced)")
    parser.add_argument("--add", metavar="DOCS", help="documents Parquet to add to the index --index (a local folder)")
    parser.add_argument(
        "--update", metavar="DOCS", help="documents Parquet to bring the index --index to (all of its documents)"
    )
    parser.add_argument("--index", help="with --add or --update: the index to grow or update (its settings are kept)")
    add_options(parser, {"retrieval": RetrievalSettings()}, only=INDEX_OPTIONS)
    add_options(parser, {"run": RunSettings()}, only=RUN_OPTIONS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    with RayLogFilter() as ray_logs:  # without --verbose, Ray's C++ log lines are kept out of stderr while Ray runs
        return _index(args, ray_logs)


def _index(args: argparse.Namespace, ray_logs: RayLogFilter) -> int:
    """Builds or grows the index the parsed command line asks for; returns the exit status."""
    try:
        output = args.output or args.index
        phases = with_values({"retrieval": RetrievalSettings(), "run": RunSettings(output=output)}, vars(args))
        settings = phases["retrieval"]
        problems = settings.problems()
        if problems:
            raise InputError("Invalid options:\n  - " + "\n  - ".join(problems))
        building = args.add is None and args.update is None and args.index is None and bool(
            args.documents and args.output
        )
        changing = [flag for flag, given in (("--add", args.add), ("--update", args.update)) if given is not None]
        if not building and not (len(changing) == 1 and args.index is not None and not (args.documents or args.output)):
            raise InputError(
                "give --documents and --output to build an index, --add and --index to grow one, or --update and "
                "--index to update one"
            )
        adding, updating = args.add is not None, args.update is not None
        if adding and settings.dense:
            raise InputError("--add grows a BM25 index only: build a dense or hybrid index again with --output")
        if building:
            _check_target(args.output)
        table_schema(args.add or args.update or args.documents, DOCUMENTS)
        flag = "--add" if adding else "--update" if updating else "--documents"
        fields = chosen_fields(args.documents, settings.filter_fields)[0] if building else None  # checked first
        shared = [  # the index's folder is written, and its documents read, by tasks on any node of a cluster
            SharedPath("--output" if building else "--index", output, written=True),
            SharedPath(flag, args.add or args.update or args.documents),
            *model_folder("--embedding-model", settings.embedding_model if settings.dense else None),
        ]
        if updating:
            return _update(args, settings, phases["run"], ray_logs, shared)
        cluster = start_engine(phases["run"], RayEngine(), ray_logs, shared, "jobs.index")
        if adding:
            record = add_documents_with_ray(current_version(args.index), args.add, settings.memory_budget)
        else:
            record = build_index_with_ray(settings, args.documents, args.output)
            record[FILTER_FIELDS_KEY] = add_filter_fields(args.output, record, args.documents, fields)
        if settings.dense:
            dense = add_dense_index(args.output, settings, args.documents, RayEngine(), cluster)
    except InputError as error:
        print(f"jobs.index: error: {error}", file=sys.stderr)
        return 2
    print(
        f"jobs.index: indexed {record['documents']} documents ({record['vocabulary']} terms, {record['algorithm']} "
        f"{record['parameters']}, {_shards(record)}) in {record['build_s']} s into {redact(output)}",
        flush=True,
    )
    if settings.dense:
        print(
            f"jobs.index: embedded {record['documents']} passages with {redact(dense['model'])} ({dense['dimension']} "
            f"dimensions, {len(dense['shards'])} shards) in {dense['build_s']} s",
            flush=True,
        )
        if "ann" in dense:
            ann = dense["ann"]
            searched = (f"efSearch {ann['ef_search']}" if ann["kind"] == "hnsw" else
                        f"nprobe {ann['nprobe']} of {ann['lists']} lists, {ann['candidates']} rescored")  # fmt: skip
            print(f"jobs.index: {ann['kind']} index over {ann['vectors']} vectors in {ann['build_s']} s, recall@10 of "
                  f"exact search {ann['recall@10']:.3f} ({ann['recall_queries']} of the passages' own vectors as "
                  f"queries, {searched})", flush=True)  # fmt: skip
    return 0


def _update(
    args: argparse.Namespace, settings: RetrievalSettings, run: RunSettings, ray_logs: RayLogFilter, shared: list
) -> int:
    """`--update`: brings the index to the documents (`update_index_with_ray`) and prints what changed."""
    update = check_update(args.index, args.update, settings)  # refusals before Ray starts
    cluster = start_engine(run, RayEngine(), ray_logs, shared, "jobs.index")
    record = update_index_with_ray(update, settings, RayEngine(), cluster)
    if record is None:
        print(f"jobs.index: {redact(args.index)} already holds the documents of {redact(args.update)}: nothing to "
              "update", flush=True)  # fmt: skip
        return 0
    done = record["update"]
    print(
        f"jobs.index: updated {redact(args.index)} to {record['documents']} passages: {done['added']} documents "
        f"added, {done['changed']} changed, {done['deleted']} deleted, {done['unchanged']} unchanged; "
        f"{done['shards_kept']} shards kept, {done['shards_written']} written ({done['passages_counted']} "
        f"passages counted, {done['passages_tokenized']} of them tokenized, {done['vectors_embedded']} vectors "
        f"embedded) in {done['update_s']} s",
        flush=True,
    )
    return 0


def _shards(record: dict) -> str:
    """The index's shards as the summary line gives them: how many, their size, and the budget that chose it."""
    shards = f"{record['shards']} shards of up to {record['shard_size']} passages"
    if record.get("memory_budget") is None:
        return shards
    return f"{shards}, sized for a memory budget of {record['memory_budget'] / 2**30:.1f} GiB"


def _check_target(output: str) -> None:
    """Refuses a folder that holds anything but an index: writing replaces the folder."""
    filesystem, inner = resolve_path(output)
    info = filesystem.get_file_info(inner)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type != pafs.FileType.Directory:
        raise InputError(f"--output {redact(output)}: exists and is not a folder.")
    names = {entry.base_name for entry in filesystem.get_file_info(pafs.FileSelector(inner))}
    if names and not names & {BUILD_FILE, HEADER_FILE, VERSION_FILE}:  # a sharded index has only build.json at its top
        raise InputError(
            f"--output {redact(output)}: the folder holds files but no index ({BUILD_FILE} or {HEADER_FILE}); "
            "writing the index would replace them. Choose a new or empty folder."
        )


if __name__ == "__main__":
    sys.exit(main())
