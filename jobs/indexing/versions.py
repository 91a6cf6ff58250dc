"""
Versions of an index folder, so that an update (`jobs.indexing.update`) replaces it at once: the update writes the
new version into a folder of its own inside the index folder (`v-000001/`, ...), then switches to it by rewriting
one small pointer file (`version.json`, written whole: a local file renamed into place, one object put in object
storage), then removes the version it replaced. A reader resolves the pointer once (`current_version`) and reads
that version only, so it sees the old index or the new one, never a mix; an update stopped before the switch
leaves the index as it was (its unfinished version is removed by the next update). An index that
`python -m jobs.index --output` wrote has no pointer: its files at the folder's top are its version 0.

Two updates of one index at once: the second is refused (`update_lock`): the first holds `update.lock`, which names
its process and host. A lock whose process is gone (on this host) is stale and taken over; one held from another
host cannot be checked from here and is refused until it is removed by hand. In object storage the lock is
checked, then written: two updates started within the same moment may both pass.
"""

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow.fs as pafs

from jobs.storage import InputError, read_json, redact, resolve_path

VERSION_FILE = "version.json"  # the pointer: {"version": "v-000002"}
LOCK_FILE = "update.lock"
VERSION_PREFIX = "v-"


def current_version(location: str) -> str:
    """The folder of the index version that the index folder at `location` points to (itself without a pointer)."""
    name = _pointer(location)
    return location if name is None else f"{location.rstrip('/')}/{name}"


def next_version(location: str) -> str:
    """The name of the version an update of the index at `location` writes (`v-` and a number one past the current)."""
    name = _pointer(location)
    number = 0 if name is None else int(name[len(VERSION_PREFIX) :])
    return f"{VERSION_PREFIX}{number + 1:06d}"


def switch_version(location: str, name: str) -> None:
    """Points the index at `location` to its version `name`, in one write."""
    data = json.dumps({"version": name}).encode("utf-8")
    filesystem, inner = resolve_path(location)
    path = f"{inner.rstrip('/')}/{VERSION_FILE}"
    if isinstance(filesystem, pafs.LocalFileSystem):
        partial = f"{path}.partial"
        with open(partial, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
        return
    with filesystem.open_output_stream(path) as stream:
        stream.write(data)


def remove_other_versions(location: str, kept: str | None) -> None:
    """
    Removes every version of the index at `location` but `kept` (a version's name; None: its version 0, the files at
    its top): unfinished ones an update stopped before its switch left, and the one an update replaced.
    """
    filesystem, inner = resolve_path(location)
    for entry in filesystem.get_file_info(pafs.FileSelector(inner)):
        name = entry.base_name
        if name in (VERSION_FILE, LOCK_FILE, kept) or (kept is None and not name.startswith(VERSION_PREFIX)):
            continue
        if entry.type == pafs.FileType.Directory:
            filesystem.delete_dir(entry.path)
        else:
            filesystem.delete_file(entry.path)


@contextmanager
def update_lock(location: str) -> Iterator[None]:
    """
    Holds the index folder's update lock (`LOCK_FILE`: this process's pid, host and start time) while the block runs.

    :raises InputError: If another update holds it (its process alive, or on another host), naming it.
    """
    filesystem, inner = resolve_path(location)
    path = f"{inner.rstrip('/')}/{LOCK_FILE}"
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                         time.gmtime())}  # fmt: skip
    data = json.dumps(mine).encode("utf-8")
    local = isinstance(filesystem, pafs.LocalFileSystem)
    while not _created(filesystem, path, data, local):
        holder = read_json(location, LOCK_FILE)
        if holder is None:  # removed meanwhile, or written half: try again once it is whole
            time.sleep(0.1)
            continue
        if holder.get("host") != mine["host"] or _alive(holder.get("pid")):
            raise InputError(
                f"--index {redact(location)}: another update of this index is running (pid {holder.get('pid')} on "
                f"{holder.get('host')} since {holder.get('started')}, {LOCK_FILE}): wait for it to end, or remove "
                "the file if that process is gone."
            )
        print(f"jobs.index: {redact(location)}: taking over the lock of an update that ended without releasing it "
              f"(pid {holder.get('pid')}, gone)", file=sys.stderr, flush=True)  # fmt: skip
        filesystem.delete_file(path)
    try:
        yield
    finally:
        filesystem.delete_file(path)


def _created(filesystem: pafs.FileSystem, path: str, data: bytes, local: bool) -> bool:
    """Writes the lock file unless it exists (locally at once, `O_EXCL`); whether it was written."""
    if local:
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        return True
    if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
        return False
    with filesystem.open_output_stream(path) as stream:
        stream.write(data)
    return True


def _alive(pid: object) -> bool:
    """Whether a process of this host with this pid runs."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pointer(location: str) -> str | None:
    """The version the pointer file names; None without one."""
    pointer = read_json(location, VERSION_FILE)
    name = pointer.get("version") if isinstance(pointer, dict) else None
    valid = isinstance(name, str) and name.startswith(VERSION_PREFIX) and name[len(VERSION_PREFIX) :].isdigit()
    return name if valid else None
