"""DOCX files, as Haystack's `DOCXToDocument` converts them with its defaults (tables as CSV, links as text)."""

import csv
import io
import zipfile
from dataclasses import asdict, dataclass

from qa_core.ingest.limits import ConversionOptions
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


def convert_docx(data: bytes, options: ConversionOptions | None = None) -> tuple[str, dict]:
    """
    A DOCX file's text: its body's paragraphs (a rendered page break as a form feed) and the text boxes anchored to
    them, and its tables as CSV, one element per line, as `DOCXToDocument` writes them.

    The text comes from two parts of the package only, the main document and the core properties, parsed by
    python-docx's own parser into its own element classes, so that its paragraph, table and page-break code reads
    them as it does under `docx.Document` (which also parses styles, numbering, settings, fonts and every other part,
    four fifths of its time on a small file). A package that is not that simple case (no core properties part, a
    main part that is not a Word document, a corrupt archive...) is opened by `docx.Document`, as Haystack does, and
    its error is the one reported. A package whose other parts alone are broken converts here where python-docx
    refuses it.

    Before any part is decompressed, the package's size decompressed is checked against
    `options.max_unzipped_bytes` (`check_unzipped_size`: a zip bomb is reported, never inflated). A text holding
    an XML entity reference is reported: python-docx never expands one (an external entity could read a file), and
    its text would stop there.

    :param options: The limits (`max_unzipped_bytes`).
    :returns: The text and its meta (`docx`: the core properties).
    :raises BadInput: For a file python-docx cannot open (not a DOCX, corrupt), one over the decompressed-size
        limit, or one whose text holds an entity reference.
    """
    if options is not None and options.max_unzipped_bytes is not None:
        check_unzipped_size(data, options.max_unzipped_bytes)
    parts = _main_parts(data)
    if parts is not None:
        body, properties = parts
    else:
        import docx

        try:
            document = docx.Document(io.BytesIO(data))
        except Exception as error:  # python-docx raises zipfile, lxml and its own errors on broken files
            raise BadInput(f"DOCX that python-docx cannot read (corrupt?): {type(error).__name__}: {error}") from error
        body, properties = document.element.body, document.core_properties
    _check_no_entities(body)
    try:
        text = "\n".join(_elements(body))
    except Exception as error:
        raise BadInput(f"DOCX that python-docx cannot read (corrupt?): {type(error).__name__}: {error}") from error
    return text, {"docx": asdict(_metadata(properties))}


def check_unzipped_size(data: bytes, limit: int) -> None:
    """
    Refuses a zip package whose members decompress to more than `limit` bytes together, by the sizes its directory
    declares, before any is decompressed. A directory that declares less than a member holds cannot inflate it
    further: Python's `zipfile`, which python-docx reads with, returns no more than a member's declared size, and
    then fails its checksum (a corrupt package, reported as such). A file that is not a zip archive passes (the
    converter reports it).

    :raises BadInput: Naming the limit and the size declared.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            declared = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    if declared > limit:
        raise BadInput(_over_unzipped(f"declares {declared:,} bytes decompressed", limit))


def _over_unzipped(what: str, limit: int) -> str:
    return (f"zip package (DOCX) that {what}, over the limit of {limit:,} bytes (--max-unzipped-bytes): a zip "
            "bomb? not converted")  # fmt: skip


def _check_no_entities(body) -> None:
    """Refuses a body holding an XML entity reference (never expanded: python-docx's parser keeps it as a node)."""
    from lxml import etree

    entity = next(body.iter(etree.Entity), None)
    if entity is not None:
        raise BadInput(
            f"DOCX whose text holds the XML entity reference {entity.text}: entity dropped (never expanded: it "
            "could read a file), and the rest of its text element with it; not converted"
        )


def _main_parts(data: bytes):
    """
    The main document's body and the core properties, read as `docx.Document` reads them (its package reader, its
    relationship and content-type rules, its XML parser) but from those two parts only; `None` for a package outside
    that simple case, or one this reader cannot read, left to `docx.Document`.
    """
    from docx.opc.constants import CONTENT_TYPE, RELATIONSHIP_TYPE
    from docx.opc.coreprops import CoreProperties
    from docx.opc.packuri import PACKAGE_URI
    from docx.opc.phys_pkg import PhysPkgReader
    from docx.opc.pkgreader import _ContentTypeMap, _SerializedRelationships
    from docx.oxml.parser import parse_xml

    try:
        reader = PhysPkgReader(io.BytesIO(data))
        try:
            content_types = _ContentTypeMap.from_xml(reader.content_types_xml)
            relationships = _SerializedRelationships.load_from_xml(
                PACKAGE_URI.baseURI, reader.rels_xml_for(PACKAGE_URI)
            )
            elements = {}
            for reltype, content_type in (
                (RELATIONSHIP_TYPE.OFFICE_DOCUMENT, CONTENT_TYPE.WML_DOCUMENT_MAIN),
                (RELATIONSHIP_TYPE.CORE_PROPERTIES, CONTENT_TYPE.OPC_CORE_PROPERTIES),
            ):
                matching = [rel for rel in relationships if rel.reltype == reltype]
                if len(matching) != 1 or matching[0].is_external:
                    return None
                partname = matching[0].target_partname
                if content_types[partname] != content_type:
                    return None
                elements[reltype] = parse_xml(reader.blob_for(partname))
        finally:
            reader.close()
        body = elements[RELATIONSHIP_TYPE.OFFICE_DOCUMENT].body
        if body is None:
            return None
        return body, CoreProperties(elements[RELATIONSHIP_TYPE.CORE_PROPERTIES])
    except Exception:  # whatever it is, `docx.Document` meets it too and says what it is
        return None


def _elements(body) -> list[str]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph
    from lxml.etree import _Comment

    # python-docx's paragraphs and tables read only their own elements: no parent object is needed for their text.
    elements = []
    for element in body:
        if isinstance(element, _Comment):
            continue
        if element.tag.endswith("p"):
            paragraph = Paragraph(element, None)
            elements.append(_paragraph_with_page_breaks(paragraph) if paragraph.contains_page_break else paragraph.text)
            elements.extend(_text_boxes(element))
        elif element.tag.endswith("tbl"):
            elements.append(_table_to_csv(Table(element, None)))
    return elements


def _text_boxes(element) -> list[str]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    elements = []
    for text_box in element.iter(_TEXT_BOX_CONTENT_TAG):
        if any(ancestor.tag == _FALLBACK_TAG for ancestor in text_box.iterancestors()):
            continue
        for child in text_box:
            if child.tag.endswith("p"):
                elements.append(Paragraph(child, None).text)
            elif child.tag.endswith("tbl"):
                elements.append(_table_to_csv(Table(child, None)))
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


def _metadata(properties) -> DocxMetadata:

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
