"""
The output folder: tables committed shard by shard, atomically, so that a killed run can resume.

Layout under `--output`:
- `answers/`, `questions/`, `generated_answers/`: one Parquet file per shard, `shard-00042.parquet`;
- `_shards/shard-00042.json`: the shard's completion marker and counts, written after its tables;
- `_tmp/`: files being written (a file is renamed into place only when complete);
- `_job.json`: the run's identity (configuration and inputs), so that a rerun with other settings or inputs
  is refused instead of silently mixing shards;
- `manifest.json`: written last, when every shard is committed.

A shard counts as done only when its marker exists: a rerun recomputes shards without one and overwrites
whatever half-written tables they left (same names, same content).
"""

import json
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs.config import InputError, redact
from jobs.inputs import resolve_path

TABLES = ("answers", "questions", "generated_answers")
# What the job writes, in the order `clear` deletes it: the manifest first (the run is no longer complete) and the
# identity last (a folder holding any of the others without `_job.json` is not the job's, and is never cleared).
_OWN_NAMES = ("manifest.json", *TABLES, "_shards", "_tmp", "_job.json")


class OutputFolder:
    """The job's output folder on any pyarrow filesystem; never writes outside it."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.shown = redact(uri)  # for messages: credentials in the URI never reach logs or the manifest
        self.filesystem, self.root = resolve_path(uri)

    def _path(self, *parts: str) -> str:
        """A path under the root; each part is a plain name, so nothing can point outside the folder."""
        if any(part in ("", ".", "..") or "/" in part or "\\" in part for part in parts):
            raise ValueError(f"refusing a path outside the output folder: {parts!r}")
        return "/".join([self.root.rstrip("/"), *parts])

    def _write_bytes(self, data: bytes, *parts: str) -> None:
        """Writes a file under a temporary name, then renames it into place."""
        temporary = self._path("_tmp", f"{uuid.uuid4().hex}-{parts[-1]}")
        self.filesystem.create_dir(self._path("_tmp"), recursive=True)
        self.filesystem.create_dir(self._path(*parts[:-1]), recursive=True)
        with self.filesystem.open_output_stream(temporary) as stream:
            stream.write(data)
        self.filesystem.move(temporary, self._path(*parts))

    def _read_json(self, *parts: str) -> Any | None:
        try:
            with self.filesystem.open_input_stream(self._path(*parts)) as stream:
                return json.loads(stream.read().decode("utf-8"))
        except FileNotFoundError:
            return None

    def check(self, identity: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
        """
        Checks, changing nothing, that this run may use the folder: new, holding a run with the same identity
        (then the run resumes), or `overwrite`. Cheap, so the job checks it before reading any input.

        :returns: The identity of the run the folder holds, if any.
        :raises InputError: When the folder holds a run with another configuration or other inputs (unless
            `overwrite`), or holds files with the job's names that no run of the job wrote (never deleted).
        """
        try:
            existing = self._read_json("_job.json")
        except ValueError:
            existing = {}  # unreadable: refused below unless --overwrite
        if existing is not None and not isinstance(existing, dict):
            existing = {}
        if existing is None:
            foreign = [name for name in _OWN_NAMES if name != "_tmp" and self._exists(name)]
            if foreign:
                raise InputError(
                    f"{self.shown}: holds {', '.join(foreign)} but no _job.json, so it is not the output of a "
                    "bulk-qa run; the job would replace them. Choose a new or empty --output folder."
                )
        elif existing != identity and not overwrite:
            old_config = existing.get("config", {})
            changed = sorted(
                key for key in {*old_config, *identity["config"]} if old_config.get(key) != identity["config"].get(key)
            )
            inputs_changed = existing.get("inputs") != identity["inputs"]
            raise InputError(
                f"{self.shown}: holds the output of a run with "
                + (f"other settings ({', '.join(changed)})" if changed else "")
                + (" and " if changed and inputs_changed else "")
                + ("other input files" if inputs_changed else "")
                + ". Pass --overwrite to replace it, or choose another --output."
            )
        return existing

    def claim(self, identity: dict[str, Any], overwrite: bool) -> None:
        """
        Makes the folder this run's (see `check`, which it runs first). With `overwrite`, an earlier run's
        tables are deleted first.
        """
        existing = self.check(identity, overwrite)
        if existing is not None and (overwrite or existing != identity):
            self.clear()
        self._write_bytes(json.dumps(identity, sort_keys=True, indent=2).encode("utf-8"), "_job.json")

    def _exists(self, name: str) -> bool:
        return self.filesystem.get_file_info(self._path(name)).type != pafs.FileType.NotFound

    def clear(self) -> None:
        """Deletes this job's own files and folders in the output folder (nothing else)."""
        for name in _OWN_NAMES:
            info = self.filesystem.get_file_info(self._path(name))
            if info.type == pafs.FileType.Directory:
                self.filesystem.delete_dir(self._path(name))
            elif info.type == pafs.FileType.File:
                self.filesystem.delete_file(self._path(name))

    def committed_shards(self) -> dict[int, dict[str, Any]]:
        """The completion markers of committed shards, by shard number."""
        selector = pafs.FileSelector(self._path("_shards"), allow_not_found=True)
        markers = {}
        for info in self.filesystem.get_file_info(selector):
            if info.base_name.startswith("shard-") and info.base_name.endswith(".json"):
                marker = self._read_json("_shards", info.base_name)
                markers[marker["shard"]] = marker
        return markers

    def commit_shard(self, shard: int, tables: dict[str, pa.Table], marker: dict[str, Any]) -> None:
        """Writes a shard's tables, each atomically, then its completion marker."""
        name = f"shard-{shard:05d}"
        for table_name, table in tables.items():
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            self._write_bytes(sink.getvalue().to_pybytes(), table_name, f"{name}.parquet")
        self._write_bytes(
            json.dumps({**marker, "shard": shard}, sort_keys=True).encode("utf-8"), "_shards", f"{name}.json"
        )

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Writes manifest.json, the sign that the run is complete."""
        self._write_bytes(json.dumps(manifest, indent=2, sort_keys=True, default=str).encode("utf-8"), "manifest.json")

    def table_path(self, table_name: str) -> str:
        """Where a table's files are (a URI for remote filesystems, credentials masked)."""
        return self.shown.rstrip("/") + "/" + table_name
