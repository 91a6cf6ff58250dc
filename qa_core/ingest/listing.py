"""
A local input folder's files, listed without ever leaving it: symbolic links are not followed unless asked for, and
then only to targets inside the folder, each folder walked once (a link loop cannot multiply the listing); a file
name that is not UTF-8 is listed, its bytes kept for opening it and its id escaped into valid text; whatever is
skipped (a link, a FIFO, a device) is a report row naming it and why.
"""

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from qa_core.ingest.report import ReportRow

# A name's bytes that are not UTF-8 written as `\xNN` in its id and report rows: valid text, and one id per name.
_NAME_ERRORS = "backslashreplace"


@dataclass(frozen=True)
class ListedFile:
    """
    A regular file under the input root.

    :param path: Its path relative to the root, POSIX separators, as text: its documents' id and its report rows'
        path (bytes that are not UTF-8 escaped as `\\xNN`).
    :param raw: The same path as the file system's bytes, to open it by.
    :param size: Its size in bytes.
    :param mtime_ns: Its modification time, nanoseconds since the epoch.
    """

    path: str
    raw: bytes
    size: int
    mtime_ns: int = 0


@dataclass
class Listing:
    """
    What a folder holds: its regular files, sorted by path, and a report row for every entry skipped (hidden
    entries, whose names start with a dot, are skipped without one).
    """

    files: list[ListedFile] = field(default_factory=list)
    report: list[ReportRow] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        """The files' paths (text), in order."""
        return [listed.path for listed in self.files]


def display_path(raw: bytes) -> str:
    """A relative path's bytes as text: UTF-8, with any byte that is not written `\\xNN`."""
    return raw.decode("utf-8", _NAME_ERRORS)


def list_folder_files(root: str | Path, follow_symlinks: bool = False) -> Listing:
    """
    Every regular file under `root` (hidden entries skipped), never reading outside it.

    Without `follow_symlinks`, every symbolic link is a report row. With it, a link is followed when its target
    (resolved) lies inside `root`; a link out of it, a broken one, and one to a folder already walked (a loop to a
    parent, or a second way to one folder) are report rows. Folders are walked plain ones first, then through
    links, each once (by device and inode), so the listing is as long as the folder's contents, whatever the links.

    :param root: The input folder (itself a link is fine: it is what the user named).
    :param follow_symlinks: Follow links whose targets are inside `root`.
    :raises FileNotFoundError: If `root` is not a folder.
    """
    root_bytes = os.fsencode(root)
    if not os.path.isdir(root_bytes):
        raise FileNotFoundError(f"The input folder {root} does not exist or is not a folder.")
    listing = Listing()
    root_stat = os.stat(root_bytes)
    walked = {(root_stat.st_dev, root_stat.st_ino): b""}  # (device, inode) -> the relative path it was walked as
    folders: list[bytes] = [b""]  # relative paths of folders to walk, plain ones
    linked: list[tuple[bytes, os.stat_result]] = []  # links to folders inside the root, walked after the plain ones
    while folders or linked:
        if not folders:
            relative, target = linked.pop(0)
            key = (target.st_dev, target.st_ino)
            if key in walked:
                where = display_path(walked[key].rstrip(b"/")) or "."
                listing.report.append(_skipped(relative, _already_walked(relative, walked[key], where)))
                continue
            walked[key] = relative
            folders.append(relative)
            continue
        relative = folders.pop(0)
        for entry in _entries(root_bytes, relative, listing):
            path = relative + entry.name
            if entry.is_symlink():
                target = _link_target(root_bytes, path, follow_symlinks, listing)
                if target is None:
                    continue
                if stat.S_ISDIR(target.st_mode):
                    linked.append((path + b"/", target))
                    continue
                info = target
            else:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError as error:
                    listing.report.append(_skipped(path, f"cannot read the entry: {error.strerror or error}"))
                    continue
                if stat.S_ISDIR(info.st_mode):
                    walked[(info.st_dev, info.st_ino)] = path + b"/"
                    folders.append(path + b"/")
                    continue
            if stat.S_ISREG(info.st_mode):
                listing.files.append(ListedFile(display_path(path), path, info.st_size, info.st_mtime_ns))
            else:
                listing.report.append(_skipped(path, "not a regular file (a FIFO, socket or device): not read"))
    listing.files.sort(key=lambda listed: listed.path)
    listing.report.sort(key=lambda row: row.path)
    return listing


def is_inside(path: bytes, root: bytes) -> bool:
    """Whether `path`, every link in it resolved, lies inside the folder `root` (resolved too)."""
    real_root = os.path.realpath(root)
    return os.path.commonpath([os.path.realpath(path), real_root]) == real_root


def list_files(root: str | Path, follow_symlinks: bool = False) -> list[str]:
    """The paths of `list_folder_files(root, follow_symlinks)`'s files (its report rows dropped: tests, tools)."""
    return list_folder_files(root, follow_symlinks).paths


def _entries(root: bytes, relative: bytes, listing: Listing) -> list[os.DirEntry]:
    """A folder's entries that are not hidden, sorted by name; a folder that cannot be read is a report row."""
    try:
        with os.scandir(os.path.join(root, relative) if relative else root) as entries:
            return sorted((entry for entry in entries if not entry.name.startswith(b".")), key=lambda e: e.name)
    except OSError as error:
        listing.report.append(_skipped(relative.rstrip(b"/"), f"cannot list the folder: {error.strerror or error}"))
        return []


def _link_target(root: bytes, relative: bytes, follow: bool, listing: Listing) -> os.stat_result | None:
    """A link's target's status when it is to be followed, else `None` with the link's report row added."""
    if not follow:
        listing.report.append(_skipped(relative, "symbolic link not followed (--follow-symlinks follows links "
                                                 "to files and folders inside the input folder)"))  # fmt: skip
        return None
    full = os.path.join(root, relative)
    if not is_inside(full, root):
        listing.report.append(_skipped(relative, "symbolic link to a target outside the input folder: not followed"))
        return None
    try:
        return os.stat(full)
    except OSError as error:
        listing.report.append(_skipped(relative, f"broken symbolic link: {error.strerror or error}"))
        return None


def _already_walked(link: bytes, walked_as: bytes, where: str) -> str:
    """Why a link to a folder walked already is not followed: a loop (to a folder holding it) or a second way."""
    if link.startswith(walked_as):
        return f"symbolic link loop: it points to {where}, a folder holding it; not followed"
    return f"symbolic link to a folder listed already as {where}: not followed again"


def _skipped(relative: bytes, reason: str) -> ReportRow:
    return ReportRow(display_path(relative.rstrip(b"/")), None, reason)


__all__ = ["ListedFile", "Listing", "display_path", "is_inside", "list_files", "list_folder_files"]
