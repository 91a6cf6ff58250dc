"""PDF files, as Haystack's `PyPDFToDocument` converts them: pages' text joined by form feeds."""

import io

from qa_core.ingest.report import BadInput


def convert_pdf(data: bytes) -> tuple[str, dict]:
    """
    A PDF's text with pypdf, as `PyPDFToDocument` with its defaults extracts it (plain mode, orientations 0, 90,
    180 and 270, space width 200): one text per page, joined by form feeds, empty pages kept as empty texts, so
    that the `n`th form feed starts page `n + 1` and page numbers hold.

    :returns: The text and its meta (`pages`: the PDF's page count).
    :raises BadInput: For a PDF pypdf cannot read (corrupt, truncated), an encrypted one it cannot open without a
        password, or one whose pages hold no text layer at all (scanned images need OCR first; Haystack returns an
        empty document there).
    """
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError

    try:
        reader = PdfReader(io.BytesIO(data))  # tries the empty password on an encrypted file
        texts = [
            page.extract_text(orientations=(0, 90, 180, 270), extraction_mode="plain", space_width=200.0)
            for page in reader.pages
        ]
    except FileNotDecryptedError as error:
        raise BadInput("encrypted PDF: it cannot be opened without a password") from error
    except Exception as error:  # pypdf raises many kinds (PdfReadError, ValueError, KeyError...) on broken files
        reason = f"PDF that pypdf cannot read (corrupt or truncated?): {type(error).__name__}: {error}"
        raise BadInput(reason) from error
    text = "\f".join(texts)
    if not text.strip():
        raise BadInput(f"PDF without a text layer: none of its {len(texts)} pages holds text (scanned? run OCR first)")
    return text, {"pages": len(texts)}


__all__ = ["convert_pdf"]
