"""
Files under an input root: listing, reading, decoding text, and the documents' stable ids and common meta.

A document's id is derived from its file's path relative to the input root, so it is the same across runs and
machines: the relative POSIX path for a whole file, `path#LINE` for a JSONL line or CSV record (its 1-based line in
the file), or the value of the user's id column.
"""

import codecs
import io
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, TextIO

from qa_core.ingest.listing import ListedFile, is_inside, list_files
from qa_core.ingest.report import BadInput

# UTF-16 and UTF-32 byte order marks: text whose ASCII characters hold NUL bytes (and take more bytes than in UTF-8).
WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
# How many leading bytes are inspected to tell binary data from text.
SNIFF_BYTES = 8192
# Bytes decoded at a time when a file is checked to be valid text without being held whole; a text file of at most
# this size is decoded whole (faster for small files).
CHUNK_BYTES = 2**20
# The encoding preferred among equally plausible ones (`_detect`), and how much more garbled (charset-normalizer's
# chaos, 0 to 1) than the best candidate it may read and still be chosen.
WESTERN = "cp1252"
WESTERN_SLACK = 0.01


def open_file(root: str | Path, relative_path: str | bytes, follow_symlinks: bool = False) -> BinaryIO:
    """
    A file, open for reading bytes (buffered, seekable). Unless `follow_symlinks`, a file that has become a symbolic
    link since it was listed is not opened (`O_NOFOLLOW`); with it, one whose target is no longer inside `root`.

    :param relative_path: The path relative to `root`: text, or the file system's bytes (`listing.ListedFile.raw`).
    :raises BadInput: If the file cannot be opened (permissions, vanished, a link).
    """
    root_bytes = os.fsencode(root)
    path = os.path.join(root_bytes, os.fsencode(relative_path))
    if follow_symlinks and not is_inside(path, root_bytes):
        raise BadInput("symbolic link to a target outside the input folder: not read")
    flags = os.O_RDONLY | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        return os.fdopen(os.open(path, flags), "rb")
    except OSError as error:
        raise BadInput(f"cannot read the file: {error.strerror or error}") from error


@dataclass(frozen=True)
class ListingOpener:
    """
    Opens a listed file (`convert.Opener`) by its path as text, through its path's own bytes
    (`listing.ListedFile.raw`: a name that is not UTF-8 is opened as it is); picklable, for the converter process.

    :param root: The input folder.
    :param raw: Each file's path as bytes, by its path as text (a path not in it is opened as it is written).
    :param follow_symlinks: Open a file through a symbolic link.
    """

    root: str
    raw: dict[str, bytes]
    follow_symlinks: bool = False

    @classmethod
    def of(cls, root: str | Path, files: Iterable[ListedFile], follow_symlinks: bool = False) -> "ListingOpener":
        """The opener of a listing's files."""
        return cls(str(root), {listed.path: listed.raw for listed in files}, follow_symlinks)

    def __call__(self, relative_path: str) -> BinaryIO:
        return open_file(self.root, self.raw.get(relative_path, relative_path), self.follow_symlinks)


@dataclass(frozen=True)
class Decoded:
    """
    A file's text and how it was decoded.

    :param text: The text.
    :param encoding: The encoding used (a Python codec name).
    :param confidence: How sure the choice is, from 0 to 1: 1.0 for the first encoding tried or the one the user
        gave, where the bytes are valid in it; else 1 minus charset-normalizer's "chaos" (the share of the text
        that looks garbled) of the chosen candidate.
    """

    text: str
    encoding: str
    confidence: float


def decode_text(data: bytes, encoding: str = "utf-8", given: str | None = None) -> Decoded:
    """
    Text bytes as a string: decoded with `given` when the user named the encoding; else with `encoding` (the one
    Haystack's converter of the format uses) when they are valid in it, else with the encoding charset-normalizer
    detects, Windows-1252 preferred where it is one of its best candidates (`_detect`).

    :param data: The file's bytes.
    :param encoding: The first encoding to try.
    :param given: The encoding the user gave (`--encoding`), the only one tried.
    :raises BadInput: If the bytes hold NUL bytes without a UTF-16 or UTF-32 byte order mark (binary data), are not
        valid in `given`, or no encoding can be detected.
    """
    if b"\x00" in data[:SNIFF_BYTES] and not data.startswith(WIDE_BOMS):
        raise BadInput("binary data (NUL bytes) under a text file extension")
    if given:
        try:
            return Decoded(data.decode(given), given, 1.0)
        except UnicodeDecodeError as error:
            raise BadInput(f"not {given} text (--encoding {given}): {error.reason} at byte {error.start:,}") from None
    try:
        return Decoded(data.decode(encoding), encoding, 1.0)
    except UnicodeDecodeError:
        pass
    return _detect(data, encoding)


def _detect(data: bytes, tried: str) -> Decoded:
    """
    The encoding charset-normalizer finds best, but Windows-1252 where the bytes read in it are as little garbled
    (charset-normalizer's chaos, within `WESTERN_SLACK`): charset-normalizer ranks short French or German text in
    Latin-1 or Windows-1252 as Windows-1250 about as often as not (`à` read as `ŕ`), while Central European text in
    Windows-1250 read as Windows-1252 gives symbols inside words (`Za¿ó³æ`), which it counts as garbled or rules
    out. (Latin-1 is Windows-1252 but for control characters no text holds.)
    """
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None:
        raise BadInput(f"not {tried} text, and no text encoding could be detected (binary data?)")
    if best.encoding != WESTERN:
        western = from_bytes(data, cp_isolation=[WESTERN]).best()
        if western is not None and western.chaos <= best.chaos + WESTERN_SLACK:
            best = western
    return Decoded(str(best), best.encoding, round(1.0 - best.chaos, 3))


def open_text(stream: BinaryIO, encoding: str, newline: str, given: str | None = None) -> tuple[TextIO, Decoded]:
    """
    A text file as a text stream, for a converter that reads it line by line: a file larger than `CHUNK_BYTES` that
    is valid in `given` or `encoding` (checked in a first pass over it, a chunk at a time) decoded as it is read,
    so that it is never held whole; a smaller one, or one in another encoding, decoded whole as `decode_text`
    decodes it (the detection needs all of it).

    :param stream: The file, open for reading bytes, seekable, at its start.
    :param encoding: The first encoding to try.
    :param newline: Where lines end, as `io.TextIOWrapper` takes it ("\n": there only; "": everywhere, untranslated).
    :param given: The encoding the user gave (`--encoding`), the only one tried.
    :returns: The text stream and how it is decoded (`Decoded.text` empty for a stream).
    :raises BadInput: As `decode_text`.
    """
    first = stream.read(CHUNK_BYTES)
    if len(first) < CHUNK_BYTES:  # the whole file: decoded at once
        decoded = decode_text(first, encoding, given)
        return io.StringIO(decoded.text, newline=newline), replace(decoded, text="")
    if b"\x00" in first[:SNIFF_BYTES] and not first.startswith(WIDE_BOMS):
        raise BadInput("binary data (NUL bytes) under a text file extension")
    streamed = given or encoding
    decoder = codecs.getincrementaldecoder(streamed)()
    try:
        chunk = first
        while chunk:
            decoder.decode(chunk)
            chunk = stream.read(CHUNK_BYTES)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        stream.seek(0)
        decoded = decode_text(stream.read(), encoding, given)  # `given`: its error, naming the byte
        return io.StringIO(decoded.text, newline=newline), replace(decoded, text="")
    stream.seek(0)
    return io.TextIOWrapper(stream, encoding=streamed, newline=newline), Decoded("", streamed, 1.0)


def file_id(relative_path: str) -> str:
    """The id of a document made of a whole file: its path relative to the input root."""
    return relative_path


def row_id(relative_path: str, line: int) -> str:
    """The id of a document made of one JSONL line or CSV record: `path#LINE` (1-based line)."""
    return f"{relative_path}#{line}"


def base_meta(relative_path: str, file_format: str, size_bytes: int) -> dict:
    """The meta every document starts with: its file, the file's format and byte size."""
    return {"file_path": relative_path, "format": file_format, "size_bytes": size_bytes}


__all__ = [
    "WIDE_BOMS", "Decoded", "ListingOpener", "base_meta", "decode_text", "file_id", "list_files", "open_file",
    "open_text", "row_id",
]  # fmt: skip
