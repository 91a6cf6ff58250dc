"""
Files under an input root: listing, reading, decoding text, and the documents' stable ids and common meta.

A document's id is derived from its file's path relative to the input root, so it is the same across runs and
machines: the relative POSIX path for a whole file, `path#LINE` for a JSONL line or CSV record (its 1-based line in
the file), or the value of the user's id column.
"""

import codecs
import io
import os
from pathlib import Path
from typing import BinaryIO, TextIO

from qa_core.ingest.report import BadInput

# UTF-16 and UTF-32 byte order marks: text whose ASCII characters hold NUL bytes.
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
# How many leading bytes are inspected to tell binary data from text.
SNIFF_BYTES = 8192
# Bytes decoded at a time when a file is checked to be valid text without being held whole; a text file of at most
# this size is decoded whole (faster for small files).
CHUNK_BYTES = 2**20


def list_files(root: str | Path) -> list[str]:
    """
    Every regular file under `root`, as paths relative to it with POSIX separators, sorted (hidden files and
    folders, whose names start with a dot, are skipped).

    :param root: The input folder.
    :returns: The relative paths.
    :raises FileNotFoundError: If `root` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"The input folder {root} does not exist or is not a folder.")
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(name for name in dirs if not name.startswith("."))
        for name in files:
            if not name.startswith("."):
                found.append((Path(folder) / name).relative_to(root).as_posix())
    return sorted(found)


def open_file(root: str | Path, relative_path: str) -> BinaryIO:
    """
    A file, open for reading bytes (buffered, seekable).

    :raises BadInput: If the file cannot be opened (permissions, vanished).
    """
    try:
        return (Path(root) / relative_path).open("rb")
    except OSError as error:
        raise BadInput(f"cannot read the file: {error.strerror or error}") from error


def decode_text(data: bytes, encoding: str = "utf-8") -> tuple[str, str]:
    """
    Text bytes as a string: decoded with `encoding` (the one Haystack's converter of the format uses) when they are
    valid in it, else with the encoding charset-normalizer detects.

    :param data: The file's bytes.
    :param encoding: The first encoding to try.
    :returns: The text and the encoding used (`encoding`, or the detected one's Python name).
    :raises BadInput: If the bytes hold NUL bytes without a UTF-16 or UTF-32 byte order mark (binary data), or no
        encoding can be detected.
    """
    if b"\x00" in data[:SNIFF_BYTES] and not data.startswith(_WIDE_BOMS):
        raise BadInput("binary data (NUL bytes) under a text file extension")
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None:
        raise BadInput(f"not {encoding} text, and no text encoding could be detected (binary data?)")
    return str(best), best.encoding


def open_text(stream: BinaryIO, encoding: str, newline: str) -> tuple[TextIO, str]:
    """
    A text file as a text stream, for a converter that reads it line by line: a file larger than `CHUNK_BYTES` that
    is valid in `encoding` (checked in a first pass over it, a chunk at a time) decoded as it is read, so that it is
    never held whole; a smaller one, or one in another encoding, decoded whole as `decode_text` decodes it (the
    detection needs all of it).

    :param stream: The file, open for reading bytes, seekable, at its start.
    :param encoding: The first encoding to try.
    :param newline: Where lines end, as `io.TextIOWrapper` takes it ("\n": there only; "": everywhere, untranslated).
    :returns: The text stream and the encoding used.
    :raises BadInput: As `decode_text`.
    """
    first = stream.read(CHUNK_BYTES)
    if len(first) < CHUNK_BYTES:  # the whole file: decoded at once
        text, used = decode_text(first, encoding)
        return io.StringIO(text, newline=newline), used
    if b"\x00" in first[:SNIFF_BYTES] and not first.startswith(_WIDE_BOMS):
        raise BadInput("binary data (NUL bytes) under a text file extension")
    decoder = codecs.getincrementaldecoder(encoding)()
    try:
        chunk = first
        while chunk:
            decoder.decode(chunk)
            chunk = stream.read(CHUNK_BYTES)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        stream.seek(0)
        text, detected = decode_text(stream.read(), encoding)
        return io.StringIO(text, newline=newline), detected
    stream.seek(0)
    return io.TextIOWrapper(stream, encoding=encoding, newline=newline), encoding


def file_id(relative_path: str) -> str:
    """The id of a document made of a whole file: its path relative to the input root."""
    return relative_path


def row_id(relative_path: str, line: int) -> str:
    """The id of a document made of one JSONL line or CSV record: `path#LINE` (1-based line)."""
    return f"{relative_path}#{line}"


def base_meta(relative_path: str, file_format: str, size_bytes: int) -> dict:
    """The meta every document starts with: its file, the file's format and byte size."""
    return {"file_path": relative_path, "format": file_format, "size_bytes": size_bytes}


__all__ = ["base_meta", "decode_text", "file_id", "list_files", "open_file", "open_text", "row_id"]
