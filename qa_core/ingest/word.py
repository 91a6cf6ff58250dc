"""DOCX files, as Haystack's `DOCXToDocument` converts them with its defaults (tables as CSV, links as text)."""

import csv
import io
from dataclasses import asdict, dataclass

from qa_core.ingest.report import BadInput

_WORD_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_TEXT_BOX_CONTENT_TAG = f"{{{_WORD_NS}}}txbxContent"
# A text box is written twice, as a drawing and in a VML fallback under mc:Fallback: only the first is read.
_FALLBACK_TAG = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


@dataclass
class DocxMetadata:
    """The document's core properties, as Haystack's `DOCXMetadata` records them under `meta["docx"]`."""

    author: str
    category: str
    comments: str
    content_status: str
    created: str | None
    identifier: str
    keywords: str
    language: str
    last_modified_by: str
    last_printed: str | None
    modified: str | None
    revision: int
    subject: str
    title: str
    version: str


def convert_docx(data: bytes) -> tuple[str, dict]:
    """
    A DOCX file's text: its body's paragraphs (a rendered page break as a form feed) and the text boxes anchored to
    them, and its tables as CSV, one element per line, as `DOCXToDocument` writes them.

    :returns: The text and its meta (`docx`: the core properties).
    :raises BadInput: For a file python-docx cannot open (not a DOCX, corrupt).
    """
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
        text = "\n".join(_elements(document))
    except Exception as error:  # python-docx raises zipfile, lxml and its own errors on broken files
        raise BadInput(f"DOCX that python-docx cannot read (corrupt?): {type(error).__name__}: {error}") from error
    return text, {"docx": asdict(_metadata(document))}


def _elements(document) -> list[str]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph
    from lxml.etree import _Comment

    elements = []
    for element in document.element.body:
        if isinstance(element, _Comment):
            continue
        if element.tag.endswith("p"):
            paragraph = Paragraph(element, document)
            elements.append(_paragraph_with_page_breaks(paragraph) if paragraph.contains_page_break else paragraph.text)
            elements.extend(_text_boxes(element, document))
        elif element.tag.endswith("tbl"):
            elements.append(_table_to_csv(Table(element, document)))
    return elements


def _text_boxes(element, document) -> list[str]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    elements = []
    for text_box in element.iter(_TEXT_BOX_CONTENT_TAG):
        if any(ancestor.tag == _FALLBACK_TAG for ancestor in text_box.iterancestors()):
            continue
        for child in text_box:
            if child.tag.endswith("p"):
                elements.append(Paragraph(child, document).text)
            elif child.tag.endswith("tbl"):
                elements.append(_table_to_csv(Table(child, document)))
    return elements


def _paragraph_with_page_breaks(paragraph) -> str:
    """The paragraph's text with a form feed where each rendered page break falls."""
    text = ""
    for index, page_break in enumerate(paragraph.rendered_page_breaks):
        if index == 0:
            if page_break.preceding_paragraph_fragment:
                text += page_break.preceding_paragraph_fragment.text
            text += "\f"
            if page_break.following_paragraph_fragment:
                text += page_break.following_paragraph_fragment.text
        else:
            text += "\f"
    return text


def _table_to_csv(table) -> str:
    output = io.StringIO()
    writer = csv.writer(output, quoting=csv.QUOTE_MINIMAL)
    for row in table.rows:
        writer.writerow(["\n".join(paragraph.text for paragraph in cell.paragraphs).strip() for cell in row.cells])
    return output.getvalue().strip()


def _metadata(document) -> DocxMetadata:
    properties = document.core_properties

    def iso(value):
        return value.isoformat() if value else None

    return DocxMetadata(
        author=properties.author,
        category=properties.category,
        comments=properties.comments,
        content_status=properties.content_status,
        created=iso(properties.created),
        identifier=properties.identifier,
        keywords=properties.keywords,
        language=properties.language,
        last_modified_by=properties.last_modified_by,
        last_printed=iso(properties.last_printed),
        modified=iso(properties.modified),
        revision=properties.revision,
        subject=properties.subject,
        title=properties.title,
        version=properties.version,
    )


__all__ = ["convert_docx"]
