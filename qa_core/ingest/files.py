"""
Files and folders into documents, each file within its limits: converted in this process (`convert`), or, with a
time or memory limit, in this process's converter process (`converter_process`), which is killed past the limit.

Usage example:
```python
result = convert_folder("corpus/", options=ConversionOptions(timeout_s=30.0))
for row in result.report:
    print(row.path, row.line, row.reason)
```
"""

from collections.abc import Iterable

from qa_core.ingest.convert import Converted, Opener, check_unique_ids, convert_in_process, source_of
from qa_core.ingest.converter_process import shared_converter
from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.listing import list_folder_files
from qa_core.ingest.rows import RowColumns
from qa_core.ingest.sources import ListingOpener


def convert_file(
    root: str,
    relative_path: str,
    columns: RowColumns | None = None,
    options: ConversionOptions | None = None,
    open_input: Opener | None = None,
    utf8_above: int | None = None,
) -> Converted:
    """
    One file's documents, or the report rows saying why it gave none (never an exception for bad input): see
    `convert.convert_in_process` for the documents' meta and the parameters.

    :param options: The encoding and limits (`limits.ConversionOptions`); with a time or memory limit, the file is
        converted in this process's converter process (`converter_process.shared_converter`), killed past the time
        limit, and a file past either limit gets its report row. Default: no limits, converted here.
    :raises MemoryError: When the file needs more memory than this process has (in the converter process: its
        report row).
    """
    options = options or ConversionOptions()
    if not options.isolated:
        return convert_in_process(root, relative_path, columns, options, open_input, utf8_above)
    kwargs = {"columns": columns, "open_input": open_input, "utf8_above": utf8_above}
    return shared_converter().convert(root, relative_path, options, **kwargs)


def convert_files(
    root: str,
    relative_paths: Iterable[str],
    columns: RowColumns | None = None,
    options: ConversionOptions | None = None,
    open_input: Opener | None = None,
    utf8_above: int | None = None,
) -> Converted:
    """`convert_file` for each file, their results concatenated (ids are not checked here: see `check_unique_ids`)."""
    result = Converted()
    for path in relative_paths:
        result.extend(convert_file(root, path, columns, options, open_input, utf8_above))
    return result


def convert_folder(root: str, columns: RowColumns | None = None, options: ConversionOptions | None = None) -> Converted:
    """
    Every file under `root` (see `listing.list_folder_files`: its report rows come first), converted, with ids
    checked unique.

    :raises DuplicateIdError: If two documents have one id, naming both sources.
    """
    options = options or ConversionOptions()
    listing = list_folder_files(root, options.follow_symlinks)
    opener = ListingOpener.of(root, listing.files, options.follow_symlinks)
    result = Converted(report=list(listing.report))
    result.extend(convert_files(root, listing.paths, columns, options, opener))
    check_unique_ids((doc.id, source_of(doc)) for doc in result.documents)
    return result


__all__ = ["convert_file", "convert_files", "convert_folder"]
