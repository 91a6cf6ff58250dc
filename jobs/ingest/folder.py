"""
An input folder of files, a local path or a URI (any filesystem pyarrow reads: `s3://`, `gs://`, ...): its files
listed once, as paths relative to it, and whether a `--documents` folder is one to convert or a Parquet table.
"""

from dataclasses import dataclass, field

import pyarrow.fs as pafs

from jobs.storage import resolve_path
from qa_core.ingest.convert import file_format
from qa_core.ingest.listing import list_folder_files
from qa_core.ingest.report import ReportRow


@dataclass(frozen=True)
class InputFolder:
    """
    A folder of files to convert.

    :param location: The folder (local path or URI), as given.
    :param paths: Its files, relative to it with POSIX separators, sorted (hidden files and folders skipped), as
        text (a local name's bytes that are not UTF-8 escaped: `qa_core.ingest.listing`).
    :param sizes: Their sizes in bytes, in the same order.
    :param mtimes_ns: Their modification times, nanoseconds since the epoch, in the same order.
    :param raw_paths: A local folder's paths as the file system's bytes, in the same order (`None` elsewhere).
    :param skipped: A report row for each entry not listed (symbolic links, FIFOs, unreadable folders).
    """

    location: str
    paths: list[str]
    sizes: list[int]
    mtimes_ns: list[int]
    raw_paths: list[bytes] | None = None
    skipped: list[ReportRow] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        """The files' bytes, together."""
        return sum(self.sizes)


def list_folder(location: str, follow_symlinks: bool = False) -> InputFolder:
    """
    The files under a folder (names starting with a dot, files or folders, skipped): a local one as
    `qa_core.ingest.listing.list_folder_files` lists it (symbolic links followed only with `follow_symlinks`, and
    only inside it), one on another filesystem (which has no links) as pyarrow lists it.

    :raises FileNotFoundError: If `location` is not a folder.
    """
    filesystem, root = resolve_path(location)
    if filesystem.get_file_info(root).type != pafs.FileType.Directory:
        raise FileNotFoundError(f"The input folder {location} does not exist or is not a folder.")
    if isinstance(filesystem, pafs.LocalFileSystem):
        listing = list_folder_files(root, follow_symlinks)
        files = listing.files
        paths, sizes, raw = [f.path for f in files], [f.size for f in files], [f.raw for f in files]
        return InputFolder(location, paths, sizes, [f.mtime_ns for f in files], raw, listing.report)
    prefix = root.rstrip("/") + "/"
    files = []
    for info in filesystem.get_file_info(pafs.FileSelector(root, recursive=True)):
        relative = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        if info.type == pafs.FileType.File and not any(part.startswith(".") for part in relative.split("/")):
            files.append((relative, info.size or 0, info.mtime_ns or 0))
    files.sort()
    paths, sizes, mtimes = ([file[i] for file in files] for i in range(3))
    return InputFolder(location, paths, sizes, mtimes)


def files_folder(location: str, follow_symlinks: bool = False) -> InputFolder | None:
    """
    The folder at `location` when it is a folder of files to convert: one holding a file of a format the ingestion
    converts (`qa_core.ingest.FORMATS`) and no `.parquet` file. `None` for anything else: a Parquet table's file or
    folder, a folder of neither (read as Parquet, whose checks say what is wrong), or no such path.
    """
    filesystem, root = resolve_path(location)
    if filesystem.get_file_info(root).type != pafs.FileType.Directory:
        return None
    folder = list_folder(location, follow_symlinks)
    if any(path.endswith(".parquet") for path in folder.paths):
        return None
    return folder if any(file_format(path) for path in folder.paths) else None


__all__ = ["InputFolder", "files_folder", "list_folder"]
