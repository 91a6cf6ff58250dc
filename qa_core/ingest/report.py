"""What ingestion could not turn into documents: one report row per bad file or bad row, with its reason."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportRow:
    """
    A file, or one line of a JSONL or CSV file, that gave no document.

    :param path: The file's path relative to the input root (POSIX separators).
    :param line: The 1-based line of a JSONL line or CSV record, or `None` for a whole file.
    :param reason: What was wrong, in words the user can act on.
    """

    path: str
    line: int | None
    reason: str

    def to_dict(self) -> dict:
        """:returns: `{"path": ..., "line": ..., "reason": ...}`."""
        return {"path": self.path, "line": self.line, "reason": self.reason}


class BadInput(Exception):
    """Raised by a converter for a file it cannot convert; the message becomes the report row's reason."""


class DuplicateIdError(ValueError):
    """Two documents were given one id; the message names both sources."""


__all__ = ["BadInput", "DuplicateIdError", "ReportRow"]
