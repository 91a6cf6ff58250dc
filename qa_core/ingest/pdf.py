"""PDF files, as Haystack's `PyPDFToDocument` converts them: pages' text joined by form feeds."""

import gc
import re
from typing import BinaryIO

from qa_core.ingest.report import BadInput
from qa_core.ingest.utf8 import Utf8Buffer, decode

# Bytes first mapped for a PDF's text per byte of file (address space: memory only once written; doubled as needed).
_TEXT_PER_FILE_BYTE = 2
# Pages between two collections of pypdf's released objects: they hold reference cycles, which Python's collector
# would reach only after many pages (measured on a 47 MB PDF: peak 20 MB lower at every 256 pages, time the same).
_COLLECT_EVERY = 256
# A lone surrogate (a font map pointing outside Unicode): no UTF-8 text, so no Parquet row, can hold it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def convert_pdf(stream: BinaryIO) -> tuple[str, dict]:
    """
    A PDF's text with pypdf, as `PyPDFToDocument` with its defaults extracts it (plain mode, orientations 0, 90,
    180 and 270, space width 200): one text per page, joined by form feeds, empty pages kept as empty texts, so
    that the `n`th form feed starts page `n + 1` and page numbers hold. `pdf_utf8`'s text, decoded.

    :param stream: The file, open for reading bytes, seekable.
    :returns: The text and its meta (`pages`: the PDF's page count).
    :raises BadInput: See `pdf_utf8`.
    """
    utf8, meta = pdf_utf8(stream)
    return decode(utf8), meta


def pdf_utf8(stream: BinaryIO, max_bytes: int | None = None) -> tuple[memoryview, dict]:
    """
    `convert_pdf`'s text as UTF-8 (see `utf8.Utf8Buffer`), never blank, for a caller that stores it as it is (a
    large PDF's text then never exists as a `str`, 1 to 4 bytes a character where one character is outside
    Latin-1, as Word's quotes are in many PDFs).

    Memory stays near the text's size whatever the file's: pypdf reads the objects it needs from `stream` (an
    open, seekable file: never the whole file in memory), each page's parsed objects are released once its text is
    extracted (pypdf would keep every object it read until the end), and the page texts are held as UTF-8 in one
    buffer outside Python's heap.

    :param stream: The file, open for reading bytes, seekable.
    :param max_bytes: Most bytes of text (`--max-document-bytes`): past them, the rest of the file is not read.
    :returns: The text as UTF-8 and its meta (`pages`: the PDF's page count).
    :raises BadInput: For a text over `max_bytes`, a PDF pypdf cannot read (corrupt, truncated), an encrypted one
        it cannot open without a password, or one whose pages hold no text layer at all (scanned images need OCR
        first; Haystack returns an empty document there), or one whose text holds a lone surrogate (not Unicode: no
        Parquet row can store it).
    """
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError

    try:
        reader = PdfReader(stream)  # tries the empty password on an encrypted file
        pages = len(reader.pages)
        joined = Utf8Buffer(_TEXT_PER_FILE_BYTE * stream.seek(0, 2))
        stream.seek(0)
        blank = True  # the joined text is blank (`isspace`, form feeds included) iff every page's text is
        not_unicode = None  # the first page whose text holds a lone surrogate
        for index in range(pages):
            text = reader.pages[index].extract_text(
                orientations=(0, 90, 180, 270), extraction_mode="plain", space_width=200.0
            )
            blank = blank and (not text or text.isspace())
            if not_unicode is None and _SURROGATE.search(text):
                not_unicode = index + 1
            joined.append(text if index == 0 else "\f" + text)
            if max_bytes is not None and joined.size > max_bytes:
                raise BadInput(
                    f"text over the limit of {max_bytes:,} bytes for one document (--max-document-bytes) at page "
                    f"{index + 1} of {pages}: the rest of the file not read"
                )
            _release(reader, index)
            if index % _COLLECT_EVERY == _COLLECT_EVERY - 1:
                gc.collect()
    except BadInput:
        raise
    except FileNotDecryptedError as error:
        raise BadInput("encrypted PDF: it cannot be opened without a password") from error
    except Exception as error:  # pypdf raises many kinds (PdfReadError, ValueError, KeyError...) on broken files
        reason = f"PDF that pypdf cannot read (corrupt or truncated?): {type(error).__name__}: {error}"
        raise BadInput(reason) from error
    if not_unicode is not None:
        raise BadInput(
            f"PDF whose text is not Unicode: page {not_unicode} holds a lone surrogate code point (a broken font "
            "map), which no UTF-8 text can store"
        )
    if blank:
        raise BadInput(f"PDF without a text layer: none of its {pages} pages holds text (scanned? run OCR first)")
    return joined.view(), {"pages": pages}


def _release(reader, index: int) -> None:
    """
    Drops what pypdf keeps of page `index` and of the objects it read for it (its cache of resolved objects, which
    the next page refills with what it needs, the shared font among them), so that a large PDF's objects are not
    all held at once. Only pypdf's own attributes, where this version has them.
    """
    if isinstance(getattr(reader, "resolved_objects", None), dict):
        reader.resolved_objects.clear()
    pages = getattr(reader, "flattened_pages", None)
    if isinstance(pages, list) and index < len(pages):
        pages[index] = None


__all__ = ["convert_pdf", "pdf_utf8"]
