"""
The output folder as the driver sees it: whether this run may use it (new, resumed, or `--overwrite`), the run's
identity (`_job.json`) and its manifest. The shard files themselves are written by `jobs.storage`.
"""

import json
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.bulk_qa.corpus import CORPUS_FOLDER
from jobs.bulk_qa.workers.tables import TABLES
from jobs.storage import DOCUMENT_PARTS, PAIR_NOTES, InputError, ShardStore, shard_name
from qa_core.models import changed_model_files

# The run's results, written from the committed shards at its end (see `jobs.bulk_qa.results`), its report
# (`jobs.bulk_qa.html_report`), and what `python -m jobs.evaluate` writes next to them.
RESULT_FILES = (
    "predictions.json",
    "na_probs.json",
    "evaluation.json",
    "evaluation",
    "annotated.squad.json",
    "label_studio.json",
    "label_studio.xml",
    "by_document.csv",
    "report.html",
    "refusal.yaml",
    "calibration.json",
)

# A --pool-contexts run's corpus (`jobs.bulk_qa.pooled_contexts`), inside its output folder.
CONTEXTS_FOLDER = "_contexts"
CONTEXTS_FILE = "documents.parquet"

# What the job writes, in the order `clear` deletes it: the manifest first (the run is no longer complete) and the
# identity last (a folder holding any of the others without `_job.json` is not the job's, and is never cleared).
_OWN_NAMES = (
    "manifest.json", *RESULT_FILES, *TABLES, "_shards", "_index", CORPUS_FOLDER, CONTEXTS_FOLDER, DOCUMENT_PARTS,
    PAIR_NOTES, "_tmp", "_job.json",
)  # fmt: skip


def _model_difference(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """How the model of the run a folder holds differs from this run's, for the refusal message."""
    if old is None:
        return "no record of its model's files (made by an earlier version of the job)"
    if "files" in old and "files" in new:
        return f"other model files: the model's files changed ({', '.join(changed_model_files(old, new))})"
    return "another model (or model revision)"


class OutputFolder(ShardStore):
    """The job's output folder: the shard store plus the run's identity, its manifest and the right to use it."""

    def check(self, identity: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
        """
        Checks, changing nothing, that this run may use the folder: new, holding a run with the same identity
        (then the run resumes), or `overwrite`. Cheap, so the job checks it before reading any input.

        :returns: The identity of the run the folder holds, if any.
        :raises InputError: When the folder holds a run with another configuration or other inputs, or a
            `_job.json` that is no run's record (unless `overwrite`), or holds files with the job's names that no
            run of the job wrote (never deleted).
        """
        try:
            existing = self._read_json("_job.json")
        except ValueError:
            existing = {}
        unreadable = existing is not None and (not isinstance(existing, dict) or not existing)
        if unreadable:  # refused below unless --overwrite
            existing = {}
        if existing is None:
            foreign = [name for name in _OWN_NAMES if name != "_tmp" and self._exists(name)]
            if foreign:
                raise InputError(
                    f"{self.shown}: holds {', '.join(foreign)} but no _job.json, so it is not the output of a "
                    "bulk-qa run; the job would replace them. Choose a new or empty --output folder."
                )
        elif unreadable and not overwrite:
            raise InputError(
                f"{self.shown}: holds a _job.json that is not a bulk-qa run's record (unreadable JSON, or not an "
                "object), so no run can resume there. Pass --overwrite to replace the run, or choose another --output."
            )
        elif existing != identity and not overwrite:
            old_config = existing.get("config", {})
            changed = sorted(
                key for key in {*old_config, *identity["config"]} if old_config.get(key) != identity["config"].get(key)
            )
            differences = [f"other settings ({', '.join(changed)})"] if changed else []
            old_inputs = existing.get("inputs") or {}
            inputs = sorted(name for name in {*old_inputs, *identity["inputs"]}
                            if old_inputs.get(name) != identity["inputs"].get(name))  # fmt: skip
            if inputs:
                differences.append(f"other input files ({', '.join(inputs)})")
            if existing.get("model") != identity["model"]:
                differences.append(_model_difference(existing.get("model"), identity["model"]))
            raise InputError(
                f"{self.shown}: holds the output of a run with {' and '.join(differences) or 'another identity'}. "
                "Pass --overwrite to replace it, or choose another --output."
            )
        return existing

    def claim(self, identity: dict[str, Any], overwrite: bool, keep: tuple[str, ...] = ()) -> None:
        """
        Makes the folder this run's (see `check`, which it runs first). With `overwrite`, an earlier run's
        tables are deleted first, but for `keep` (names of `_OWN_NAMES`: the converted corpus, which the run
        updates).
        """
        existing = self.check(identity, overwrite)
        if existing is not None and (overwrite or existing != identity):
            self.clear(keep)
        self._write_bytes(json.dumps(identity, sort_keys=True, indent=2).encode("utf-8"), "_job.json")

    def clear(self, keep: tuple[str, ...] = ()) -> None:
        """Deletes this job's own files and folders in the output folder (nothing else), but for `keep`."""
        for name in _OWN_NAMES:
            if name in keep:
                continue
            info = self.filesystem.get_file_info(self._path(name))
            if info.type == pafs.FileType.Directory:
                self.filesystem.delete_dir(self._path(name))
            elif info.type == pafs.FileType.File:
                self.filesystem.delete_file(self._path(name))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Writes manifest.json, the sign that the run is complete."""
        self._write_bytes(json.dumps(manifest, indent=2, sort_keys=True, default=str).encode("utf-8"), "manifest.json")

    def write_pooled_contexts(self, documents: pa.Table) -> None:
        """Writes a --pool-contexts run's corpus (`CONTEXTS_FOLDER`/`CONTEXTS_FILE`), atomically."""
        self._write_table(documents, CONTEXTS_FOLDER, CONTEXTS_FILE)

    def write_file(self, data: bytes, *parts: str) -> None:
        """Writes one of the run's result files (a name of `RESULT_FILES`, or a file in such a folder) atomically."""
        if parts[0] not in RESULT_FILES:
            raise ValueError(f"not a result file of the job: {parts!r}")
        self._write_bytes(data, *parts)

    def read_json(self, name: str) -> Any | None:
        """A JSON file of the folder (`manifest.json`, a result file), or None when it does not exist."""
        return self._read_json(name)

    def read_result_table(self, name: str) -> pa.Table:
        """A result table of the folder (a name of `RESULT_FILES`: `evaluation`), all its files."""
        if name not in RESULT_FILES:
            raise ValueError(f"not a result table of the job: {name!r}")
        return pads.dataset(self._path(name), filesystem=self.filesystem, format="parquet").to_table()

    def read_shards(self, table_name: str, shards: list[int], columns: list[str]) -> pa.Table:
        """`columns` of the committed shards' files of a table, in shard order."""
        tables = []
        for shard in sorted(shards):
            with self.filesystem.open_input_file(self._path(table_name, f"{shard_name(shard)}.parquet")) as file:
                tables.append(pq.read_table(file, columns=columns))
        return pa.concat_tables(tables)
