"""
How one file is converted and within what bounds: its text encoding, and the limits that make a hostile or broken
file a report row instead of a stuck task, a crash or a swap (time and memory, enforced from outside the converter
by `qa_core.ingest.converter_process`; decompressed bytes and text size, checked as the converters read).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class ConversionOptions:
    """
    What a conversion may do; `None` means no limit.

    :param encoding: The text files' encoding (.txt, .md, .jsonl, .csv), used instead of UTF-8 then detection.
    :param timeout_s: Seconds one file's conversion may take (wall clock): past it, the converter's process is
        killed (`qa_core.ingest.converter_process`).
    :param memory_bytes: Address space the converter's process may take (`RLIMIT_AS`): past it, the file is
        reported.
    :param max_document_bytes: Most bytes of UTF-8 text one document may hold.
    :param max_unzipped_bytes: Most bytes a zip-based file (DOCX) may decompress to, all its parts together.
    :param follow_symlinks: Open files through symbolic links (the listing followed them inside the input root).
    """

    encoding: str | None = None
    timeout_s: float | None = None
    memory_bytes: int | None = None
    max_document_bytes: int | None = None
    max_unzipped_bytes: int | None = None
    follow_symlinks: bool = False

    @property
    def isolated(self) -> bool:
        """Whether the conversion runs in a worker process (a time or memory limit needs one)."""
        return bool(self.timeout_s or self.memory_bytes)


def utf8_size_over(text: str, limit: int | None) -> int | None:
    """The UTF-8 size of `text` when it is over `limit` bytes, else `None` (no copy when the length decides)."""
    if limit is None or len(text) <= limit // 4:  # at most 4 bytes a character
        return None
    if len(text) > limit:  # at least 1 byte a character
        return len(text.encode("utf-8", "surrogatepass"))
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


def too_large(size: int, limit: int) -> str:
    """The reason for a document whose text is over `max_document_bytes`."""
    return f"text of {size:,} bytes, over the limit of {limit:,} bytes for one document (--max-document-bytes)"


__all__ = ["ConversionOptions", "too_large", "utf8_size_over"]
