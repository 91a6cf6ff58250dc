"""PDF files, as Haystack's `PyPDFToDocument` converts them: pages' text joined by form feeds."""

from typing import BinaryIO

from qa_core.ingest.report import BadInput

# How pypdf's page texts are held until the document's text is made: UTF-8 in one growing buffer takes half or a
# quarter of a `str` holding one character outside Latin-1 (Word's quotes, in many PDFs), and leaves no small
# objects behind to fragment the heap; "surrogatepass" keeps any code point pypdf gives.
_ENCODING, _ERRORS = "utf-8", "surrogatepass"


def convert_pdf(stream: BinaryIO) -> tuple[str, dict]:
    """
    A PDF's text with pypdf, as `PyPDFToDocument` with its defaults extracts it (plain mode, orientations 0, 90,
    180 and 270, space width 200): one text per page, joined by form feeds, empty pages kept as empty texts, so
    that the `n`th form feed starts page `n + 1` and page numbers hold.

    Memory stays near the text's size whatever the file's: pypdf reads the objects it needs from `stream` (an
    open, seekable file: never the whole file in memory), each page's parsed objects are released once its text is
    extracted (pypdf would keep every object it read until the end), and the page texts are held as UTF-8 in one
    buffer until the text is decoded from it.

    :param stream: The file, open for reading bytes, seekable.
    :returns: The text and its meta (`pages`: the PDF's page count).
    :raises BadInput: For a PDF pypdf cannot read (corrupt, truncated), an encrypted one it cannot open without a
        password, or one whose pages hold no text layer at all (scanned images need OCR first; Haystack returns an
        empty document there).
    """
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError

    try:
        reader = PdfReader(stream)  # tries the empty password on an encrypted file
        pages = len(reader.pages)
        joined = bytearray()
        for index in range(pages):
            text = reader.pages[index].extract_text(
                orientations=(0, 90, 180, 270), extraction_mode="plain", space_width=200.0
            )
            joined += (text if index == 0 else "\f" + text).encode(_ENCODING, _ERRORS)
            _release(reader, index)
    except FileNotDecryptedError as error:
        raise BadInput("encrypted PDF: it cannot be opened without a password") from error
    except Exception as error:  # pypdf raises many kinds (PdfReadError, ValueError, KeyError...) on broken files
        reason = f"PDF that pypdf cannot read (corrupt or truncated?): {type(error).__name__}: {error}"
        raise BadInput(reason) from error
    text = joined.decode(_ENCODING, _ERRORS)
    del joined
    if not text or text.isspace():
        raise BadInput(f"PDF without a text layer: none of its {pages} pages holds text (scanned? run OCR first)")
    return text, {"pages": pages}


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


__all__ = ["convert_pdf"]
