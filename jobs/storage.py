"""
Where the job reads and writes: filesystems for local paths and URIs, credentials masked in messages, and the
shard store that commits each shard's tables atomically (used by the aggregation tasks and by the driver), a
node's local copy of an index kept on a remote filesystem (`local_index_folder`), and the one way a file or folder is
written so that it appears complete or not at all (`written_in_place`, over `staged_copy` for remote ones).

Layout under `--output`:
- `answers/`, `questions/`, `generated_answers/`: one Parquet file per shard, `shard-00042.parquet`;
- `_shards/shard-00042.json`: the shard's completion marker and counts, written after its tables;
- `_tmp/`: files being written (a file is renamed into place only when complete);
- `_documents/part-00003.parquet`: while a run answers, a documents table too large to broadcast, split by id into
  parts (`jobs.bulk_qa.waves.partition_documents`); deleted when the run has answered every shard;
- `_pair_notes/shard-00042/<digest>.parquet`: while a wave answers, the notes of its pairs that cannot be read
  (unknown document, untokenizable), written by the tokenize tasks for the shard's aggregation: they never pass
  through the reader actors. A wave's shards start without notes; all are deleted once the run's waves have run;
- `_job.json` and `manifest.json`: the run's identity and its manifest (see `jobs.bulk_qa.output`).

A shard counts as done only when its marker exists: a rerun recomputes shards without one and overwrites
whatever half-written tables they left (same names, same content).
"""

import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

# The folder of a run's documents split into parts by id.
DOCUMENT_PARTS = "_documents"
# The folder of the notes of pairs that cannot be read, a folder per shard.
PAIR_NOTES = "_pair_notes"
PAIR_KEY = ["question_id", "position"]  # a pair's note is the one row of its question and document position


class InputError(Exception):
    """Unusable input or configuration: the job stops before any worker starts and exits with status 2."""


class ShardNotVisible(InputError):
    """
    A shard that a task committed but the driver cannot read (exit status 2): the output folder is not the same on
    every node (a node-local path), or its files were removed or damaged since.
    """

    def __init__(self, shard: int, store: "ShardStore", path: str, problem: str) -> None:
        shown = store.shown.rstrip("/") + path[len(store.root.rstrip("/")) :]
        super().__init__(
            f"{shown}: {problem}, so shard {shard} cannot count as committed: the driver counts a shard only once "
            "it reads its files there. The output folder must be the same on every node: use object storage "
            "(s3://..., gs://...) or a shared mount that every node sees at this path, then run the same command "
            "again to resume."
        )
        self.shard, self.path = shard, shown


_URI_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@]*)@")
_SECRET_QUERY = re.compile(r"(?P<key>[^?&=]*(?:key|secret|token|password|credential|signature)[^?&=]*)=[^&]*", re.I)


def redact(uri: str) -> str:
    """
    `uri` with the credentials it may carry masked: the user-info part (`s3://KEY:SECRET@bucket/...`) and query
    values whose name speaks of keys, secrets, tokens or passwords (`?secret_key=...`). Plain paths are unchanged.
    """
    uri = _URI_USERINFO.sub(r"\g<scheme>***@", uri)
    if "?" in uri:
        path, query = uri.split("?", 1)
        uri = path + "?" + _SECRET_QUERY.sub(r"\g<key>=***", query)
    return uri


def resolve_path(path: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and the path inside it for a local path or a URI (s3://, gs://, file://, ...)."""
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(path)
    try:
        return pafs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise InputError(f"{redact(path)}: unsupported path or filesystem: {error}") from None


def read_json(location: str, name: str) -> Any | None:
    """A JSON file of a folder on any filesystem; None when it does not exist or is not valid JSON."""
    filesystem, inner = resolve_path(location)
    try:
        with filesystem.open_input_stream(f"{inner.rstrip('/')}/{name}") as stream:
            return json.loads(stream.read().decode("utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def parquet_dataset(path: str) -> pads.Dataset:
    """A Parquet file or folder, local or at a URI, opened lazily (footers are read on demand)."""
    filesystem, inner = resolve_path(path)
    return pads.dataset(inner, filesystem=filesystem, format="parquet")


@contextmanager
def staged_copy(location: str, read: bool = False, replace: bool = False, write: bool = True) -> Iterator[Path]:
    """
    A local temporary copy of the file or folder at a remote `location` (object storage): filled from it first with
    `read`, and copied to it when the block ends without error (unless not `write`: a copy to read only); what was
    there is removed just before the copy with `replace`, else files there and not in the copy are kept.

    :yields: The local path to work on (inside a temporary folder; a folder the caller creates).
    """
    filesystem, inner = resolve_path(location)
    with tempfile.TemporaryDirectory() as local:
        staged = Path(local) / (PurePosixPath(inner).name or "root")
        if read:
            staged.mkdir()  # copy_files makes no folder for an object store's keys (they have no folder)
            pafs.copy_files(
                inner, str(staged), source_filesystem=filesystem, destination_filesystem=pafs.LocalFileSystem()
            )
        yield staged
        if not write:
            return
        if replace and filesystem.get_file_info(inner).type != pafs.FileType.NotFound:
            _delete(filesystem, inner)
        pafs.copy_files(str(staged), inner, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=filesystem)


@dataclass
class Staged:
    """
    Where `written_in_place` has a file or folder written.

    :param path: The local path to write (or, remote and not staged, the location itself).
    :param last: Files of the folder written after all the rest, by name (a completion marker, such as an index's
        `build.json`): locally before the folder is renamed into place, remotely after it is copied there.
    """

    path: str
    last: dict[str, bytes] = field(default_factory=dict)


@contextmanager
def written_in_place(location: str, replace: bool = True, staged: bool = True) -> Iterator[Staged]:
    """
    Writes a file or folder so that it appears at `location` complete or not at all: the one helper for it.

    Locally it is written as a hidden sibling (`.name.<random>`) and renamed into place when the block ends without
    error (removed on error); what was there is replaced, or with `replace` off kept, the new copy dropped (another
    process wrote the same folder first). Remotely (object storage) it is written into a local temporary copy
    (`staged_copy`), what was there removed just before the copy; or, not `staged`, for writers that write the remote
    place themselves (tasks of a cluster), into `location` itself, emptied first. Either way its `last` files are
    written after the rest, so that one of them marks it complete.

    Usage example:
    ```python
    with written_in_place("s3://bucket/index") as staged:
        save_shards(staged.path)
        staged.last["build.json"] = record_bytes
    ```
    """
    filesystem, inner = resolve_path(location)
    if isinstance(filesystem, pafs.LocalFileSystem):
        target = Path(inner)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        written = Staged(str(partial))
        try:
            yield written
            _write_last(partial, written.last)
            if replace and target.is_dir():
                shutil.rmtree(target)
            try:
                os.replace(partial, target)  # a file replaces the one there at once
            except OSError:
                if replace:
                    raise  # else another process wrote the folder first: its copy is kept
        finally:
            _remove(partial)  # gone once renamed; else left by an error, or not needed
        return
    if not staged:
        if replace and filesystem.get_file_info(inner).type != pafs.FileType.NotFound:
            _delete(filesystem, inner)
        written = Staged(location)
        yield written
    else:
        with staged_copy(location, replace=replace) as local:
            written = Staged(str(local))
            yield written
    for name, data in written.last.items():
        with filesystem.open_output_stream(f"{inner.rstrip('/')}/{name}") as stream:
            stream.write(data)


def _write_last(folder: Path, files: dict[str, bytes]) -> None:
    """`Staged.last`'s files, written into a local folder."""
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _remove(path: Path) -> None:
    """A local file or folder removed, if it is there."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def _delete(filesystem: pafs.FileSystem, path: str) -> None:
    """A remote file or folder deleted."""
    if filesystem.get_file_info(path).type == pafs.FileType.Directory:
        filesystem.delete_dir(path)
    else:
        filesystem.delete_file(path)


def shard_name(shard: int) -> str:
    """A shard's name in file and folder names."""
    return f"shard-{shard:05d}"


def _document_part_file(part: int) -> str:
    """The file name of part `part` of a run's documents."""
    return f"part-{part:05d}.parquet"


class ShardStore:
    """The job's output folder on any pyarrow filesystem, shard by shard; never writes outside it."""

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

    def _write_table(self, table: pa.Table, *parts: str) -> None:
        """Writes a table as one Parquet file, atomically (`_write_bytes`)."""
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self._write_bytes(sink.getvalue().to_pybytes(), *parts)

    def _exists(self, *parts: str) -> bool:
        return self.filesystem.get_file_info(self._path(*parts)).type != pafs.FileType.NotFound

    def _file_names(self, *folder: str, suffix: str) -> list[str]:
        """The names of the files ending in `suffix` in a folder under the root, sorted (none without the folder)."""
        selector = pafs.FileSelector(self._path(*folder), allow_not_found=True)
        infos = self.filesystem.get_file_info(selector)
        return sorted(
            info.base_name for info in infos if info.type == pafs.FileType.File and info.base_name.endswith(suffix)
        )

    def _read_json(self, *parts: str) -> Any | None:
        try:
            with self.filesystem.open_input_stream(self._path(*parts)) as stream:
                return json.loads(stream.read().decode("utf-8"))
        except FileNotFoundError:
            return None

    def committed_shards(self) -> dict[int, dict[str, Any]]:
        """The completion markers of committed shards, by shard number."""
        markers = {}
        for name in self._file_names("_shards", suffix=".json"):
            if name.startswith("shard-"):
                marker = self._read_json("_shards", name)
                markers[marker["shard"]] = marker
        return markers

    def commit_shard(self, shard: int, tables: dict[str, pa.Table], marker: dict[str, Any]) -> None:
        """Writes a shard's tables, each atomically, then its completion marker."""
        name = shard_name(shard)
        for table_name, table in tables.items():
            self._write_table(table, table_name, f"{name}.parquet")
        self._write_bytes(
            json.dumps({**marker, "shard": shard}, sort_keys=True).encode("utf-8"), "_shards", f"{name}.json"
        )

    def read_commit(self, shard: int, reported: dict[str, Any], table_names: tuple[str, ...]) -> dict[str, Any]:
        """
        A shard's completion marker as this process reads it, once it has found the marker the shard's task
        `reported` and read the footers of the shard's tables: how the driver counts a shard committed, whichever
        node committed it. Each table's count in the marker (`questions`, `answers`, ...) is then the rows its file
        holds, so that what the run reconciles is what this process reads.

        :raises ShardNotVisible: When the marker or a table is missing or unreadable, or the marker is not the one
            reported, naming the shard and the file.
        """
        name = shard_name(shard)
        marker_path = self._path("_shards", f"{name}.json")
        try:
            marker = self._read_json("_shards", f"{name}.json")
        except (OSError, ValueError) as error:
            raise ShardNotVisible(shard, self, marker_path, f"unreadable: {error}") from None
        if marker is None:
            raise ShardNotVisible(shard, self, marker_path, "not found")
        if marker != {**reported, "shard": shard}:
            raise ShardNotVisible(shard, self, marker_path, "holds another marker than the shard's task committed")
        for table_name in table_names:
            path = self._path(table_name, f"{name}.parquet")
            try:
                with self.filesystem.open_input_file(path) as file:
                    marker[table_name] = pq.read_metadata(file).num_rows
            except FileNotFoundError:
                raise ShardNotVisible(shard, self, path, "not found") from None
            except (OSError, pa.ArrowException) as error:
                raise ShardNotVisible(shard, self, path, f"unreadable: {error}") from None
        return marker

    def write_document_part(self, part: int, documents: pa.Table) -> None:
        """Writes (atomically) part `part` of the run's documents."""
        self._write_table(documents, DOCUMENT_PARTS, _document_part_file(part))

    def read_document_part(self, part: int) -> pa.Table | None:
        """Part `part` of the run's documents, or None when it holds none (no file)."""
        try:
            with self.filesystem.open_input_file(self._path(DOCUMENT_PARTS, _document_part_file(part))) as file:
                return pq.read_table(file)
        except FileNotFoundError:
            return None

    def delete_document_parts(self) -> None:
        """Deletes the run's document parts, if any."""
        if self._exists(DOCUMENT_PARTS):
            self.filesystem.delete_dir(self._path(DOCUMENT_PARTS))

    def write_pair_notes(self, notes: pa.Table) -> None:
        """
        Writes (atomically) the notes of a batch of pairs, one file per shard they belong to, named by the pairs
        they note: a retried task writes the same file again.
        """
        for shard in sorted(set(notes["shard"].to_pylist())):
            of_shard = notes.filter(pc.equal(notes["shard"], shard))
            keys = sorted(zip(*(of_shard[name].to_pylist() for name in PAIR_KEY), strict=True))
            digest = hashlib.sha256(json.dumps(keys).encode("utf-8")).hexdigest()[:32]
            self._write_table(of_shard, PAIR_NOTES, shard_name(shard), f"{digest}.parquet")

    def read_pair_notes(self, shard: int) -> list[dict[str, Any]]:
        """The notes of a shard's pairs that cannot be read, each pair's once (by `PAIR_KEY`)."""
        folder = (PAIR_NOTES, shard_name(shard))
        notes: dict[tuple, dict[str, Any]] = {}
        for name in self._file_names(*folder, suffix=".parquet"):
            with self.filesystem.open_input_file(self._path(*folder, name)) as file:
                for note in pq.read_table(file).to_pylist():
                    notes.setdefault(tuple(note[key] for key in PAIR_KEY), note)
        return list(notes.values())

    def delete_pair_notes(self, shards: frozenset[int] | None = None) -> None:
        """Deletes the pair notes of `shards`, or of every shard."""
        folders = [(PAIR_NOTES,)] if shards is None else [(PAIR_NOTES, shard_name(shard)) for shard in shards]
        for folder in folders:
            if self._exists(*folder):
                self.filesystem.delete_dir(self._path(*folder))

    def table_path(self, table_name: str) -> str:
        """Where a table's files are (a URI for remote filesystems, credentials masked)."""
        return self.shown.rstrip("/") + "/" + table_name


def _index_header_digest(filesystem: pafs.FileSystem, folder: str) -> str:
    """The sha256 of an index folder's header (a shard's `index.json`, else a build's `build.json`); '' for neither."""
    for name in ("index.json", "build.json"):
        try:
            with filesystem.open_input_stream(f"{folder.rstrip('/')}/{name}") as stream:
                return hashlib.sha256(stream.read()).hexdigest()
        except OSError:  # not there (FileNotFoundError, or the object store's own error)
            continue
    return ""


def local_index_folder(location: str) -> Path:
    """
    A local folder holding the index at `location`: the folder itself when it is local, else a copy in the node's
    temporary folder, made once per node, location and header (`_index_header_digest`: a shard's `index.json` holds
    its format and corpus fingerprint, so an index rebuilt at the same location gets a copy of its own, never an
    earlier one), renamed into place when complete.
    """
    if "://" not in location or location.startswith("file://"):
        return Path(resolve_path(location)[1])
    filesystem, inner = resolve_path(location)
    header = _index_header_digest(filesystem, inner)
    cache = Path(tempfile.gettempdir()) / "bulk-qa-index" / uuid.uuid5(uuid.NAMESPACE_URL, f"{location}#{header}").hex
    if not (cache / "index.json").exists():
        with written_in_place(str(cache), replace=False) as staged:  # another actor of this node may finish first
            Path(staged.path).mkdir()  # copy_files makes no folder for an object store's keys (they have no folder)
            pafs.copy_files(
                inner, staged.path, source_filesystem=filesystem, destination_filesystem=pafs.LocalFileSystem()
            )
    return cache
