"""
Test files of every format: the generators of valid files are the ingestion benchmark's (`jobs.bench.files`), shared;
the hostile ones (an XML entity, a slow page) are the tests' own.
"""

import io
import json
from pathlib import Path

from jobs.bench.files import WORD_NAMESPACE, docx_bytes, pdf_bytes


def encrypted_pdf_bytes(text: str, password: str) -> bytes:
    """A one-page PDF with a text layer, encrypted with a user password (pypdf's writer)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([text]))))
    writer.encrypt(user_password=password, owner_password=password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


MARKDOWN = """# Title

Some *emphasis* and a [link](https://example.com).

- item one
- item two

```
code block
```
"""

HTML = """<html><head><title>Ignored title</title></head><body>
<nav>Home | About | Contact</nav>
<article><h1>The main article</h1>
<p>The extractive reader finds exact spans of text in long documents, and it scores every one of them.</p>
<p>Its answers carry character offsets into the document, so that a user can check each of them in place.</p>
<p>A second paragraph adds more words, so that trafilatura's heuristics keep this article as the main content.</p>
</article><footer>Copyright footer</footer></body></html>"""

# Nothing but boilerplate: trafilatura's extraction gives nothing, the fallback the footer's text.
FOOTER_HTML = "<html><body><footer>Only a <b>footer</b>\n here</footer><script>alert(1)</script></body></html>"


LATIN1_TEXT = "Größe über Straße: Die Bäume blühen früh, während Müller schläft. Äpfel und Öl.\n"


def write_corpus(root: Path) -> dict[str, bytes]:
    """One good file of every format under `root` (some in a subfolder); returns relative path -> bytes."""
    files = {
        "notes.txt": "First line.\nSecond line, café.\n".encode(),
        "docs/readme.md": MARKDOWN.encode(),
        "web/page.html": HTML.encode(),
        "web/footer.htm": FOOTER_HTML.encode(),
        "report.pdf": pdf_bytes(["Page one text.", "", "Page three text."]),
        "letter.docx": docx_bytes(
            ["Dear reader,", "Second page starts here.", "Bye."], [["a", "b"], ["1", "2,3"]], 1, "A letter"
        ),
        "rows.jsonl": "\n".join(
            json.dumps(record)
            for record in [
                {"content": "Row one.", "lang": "en", "n": 1},
                {"id": "custom-7", "content": "Row two.", "tags": ["x", "y"]},
            ]
        ).encode()
        + b"\n",
        "table.csv": b'id,content,author\nc1,"Quoted, with a comma",Ann\n,Second row,Bob\n',
        "latin1.txt": LATIN1_TEXT.encode("latin-1"),
    }
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return files


_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
# A text box as Word writes one: a drawing under mc:Choice, its VML copy under mc:Fallback (read once, not twice).
_TEXT_BOX = f"""<w:r xmlns:w="{_W}" xmlns:mc="{_MC}"><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing>
<w:txbxContent><w:p><w:r><w:t>Boxed text.</w:t></w:r></w:p><w:tbl><w:tr><w:tc><w:p><w:r><w:t>box cell</w:t></w:r>
</w:p></w:tc></w:tr></w:tbl></w:txbxContent></w:drawing></mc:Choice><mc:Fallback><w:pict><w:txbxContent><w:p><w:r>
<w:t>Boxed text.</w:t></w:r></w:p></w:txbxContent></w:pict></mc:Fallback></mc:AlternateContent></w:r>"""


def rich_docx_bytes() -> bytes:
    """
    A DOCX file with what `DOCXToDocument`'s text depends on: empty paragraphs, tabs and line breaks, a paragraph
    with two rendered page breaks and one whose page break falls inside a hyperlink, a table with merged cells (across
    and down), a cell of two paragraphs, a nested table, a text box (with its fallback copy), a comment in the body.
    """
    import docx
    from docx.oxml import OxmlElement, parse_xml
    from lxml import etree

    document = docx.Document()
    document.add_paragraph("")
    run = document.add_paragraph().add_run("Tab\there,")
    run.add_break()
    run.add_text("a new line.")
    paragraph = document.add_paragraph()
    paragraph.add_run("Before")
    paragraph.add_run()._r.append(OxmlElement("w:lastRenderedPageBreak"))
    paragraph.add_run("between")
    paragraph.add_run()._r.append(OxmlElement("w:lastRenderedPageBreak"))
    paragraph.add_run("after.")
    linked = document.add_paragraph("Linked: ")
    link = parse_xml(
        f'<w:hyperlink xmlns:w="{_W}"><w:r><w:t>link </w:t></w:r><w:r><w:lastRenderedPageBreak/><w:t>text</w:t>'
        "</w:r></w:hyperlink>"
    )
    linked._p.append(link)
    linked.add_run(" and on.")
    document.add_paragraph()
    anchor = document.add_paragraph("Anchor of a box.")
    anchor._p.append(parse_xml(_TEXT_BOX))
    document.element.body.insert(0, etree.Comment("a comment"))
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = f"r{r}c{c}"
    table.cell(0, 0).merge(table.cell(0, 1))
    table.cell(1, 2).merge(table.cell(2, 2))
    table.cell(1, 0).add_paragraph('second "quoted" paragraph, with a comma')
    table.cell(2, 0).add_table(rows=1, cols=2).cell(0, 1).text = "nested"
    document.add_paragraph("The end.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def without_core_properties(data: bytes) -> bytes:
    """The DOCX package without its core properties part and the relationship to it."""
    import re
    import zipfile

    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            blob = source.read(item)
            if item.filename == "docProps/core.xml":
                continue
            if item.filename == "_rels/.rels":
                blob = re.sub(rb"<Relationship [^>]*core-properties[^>]*/>", b"", blob)
            target.writestr(item, blob)
    return out.getvalue()


def docx_with_entity(text_before: str, entity: str, text_after: str) -> bytes:
    """A DOCX whose one paragraph's text holds an XML entity reference (`&entity;`, declared in a DOCTYPE)."""
    import zipfile

    template = zipfile.ZipFile(io.BytesIO(docx_bytes(["x"], [["x"]], -1, "")))
    document = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<!DOCTYPE w:document [<!ENTITY {entity} '
        f'"expanded">]>\n<w:document xmlns:w="{WORD_NAMESPACE}"><w:body><w:p><w:r><w:t>{text_before}&{entity};'
        f"{text_after}</w:t></w:r></w:p></w:body></w:document>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for member in template.infolist():
            data = document.encode() if member.filename == "word/document.xml" else template.read(member)
            package.writestr(member, data)
    return out.getvalue()


def slow_html(size_bytes: int) -> bytes:
    """
    A one-line HTML page of about `size_bytes`, one-cell tables one after another: trafilatura's extraction takes
    time growing with the square of its size (measured on a shared 2-core machine: 100 KB 3.6 s, 200 KB 12 s, 1 MB
    144 s), much of it in libxml2's C code, where no signal handler stops it.
    """
    table = b"<table><tr><td>w</td></tr></table>"
    return b"<html><body>" + table * (size_bytes // len(table)) + b"</body></html>"
