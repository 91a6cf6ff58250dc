"""
What a node sees of a path, for `jobs.shared_paths`: run on every node by a task of its own, so this module imports
nothing but the standard library (a node's first task starts a worker process, which imports it).
"""

import hashlib
import os

# What a fingerprint reads: the first bytes of a file, or of the first few files of a folder.
FINGERPRINT_BYTES = 64 * 1024
FINGERPRINT_FILES = 3
TOKEN_PREFIX = ".node-probe-"  # the token file's name in a written folder (deleted once probed)


def fingerprint(path: str) -> str | None:
    """
    A cheap fingerprint of a file or folder as this machine sees it, or None when it does not exist: a file's size
    and the hash of its first `FINGERPRINT_BYTES`; a folder's entries (names, kinds and file sizes, top level only)
    and the first bytes of its first `FINGERPRINT_FILES` files by name.
    """
    digest = hashlib.sha256()
    if os.path.isfile(path):
        files = [path]
        digest.update(f"file {os.path.getsize(path)}".encode())
    elif os.path.isdir(path):
        entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        files = [entry.path for entry in entries if entry.is_file()][:FINGERPRINT_FILES]
        for entry in entries:
            size = entry.stat().st_size if entry.is_file() else -1
            digest.update(f"{entry.name}\0{size}\n".encode())
    else:
        return None
    for name in files:
        with open(name, "rb") as file:
            digest.update(file.read(FINGERPRINT_BYTES))
    return digest.hexdigest()


def observe(probes: list[tuple[str, str | None]]) -> list[str | None]:
    """
    On a node: what it sees of each `(path, token)`: the text of the token file in the folder `path` when a token
    is given, else the path's fingerprint (None for what does not exist).
    """
    seen: list[str | None] = []
    for path, token in probes:
        if token is None:
            seen.append(fingerprint(path))
            continue
        try:
            with open(os.path.join(path, TOKEN_PREFIX + token), encoding="utf-8") as file:
                seen.append(file.read())
        except OSError:
            seen.append(None)
    return seen
