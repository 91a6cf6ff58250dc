"""Test files of every format, written with the formats' own libraries or by hand (PDF)."""

import io
import json
from pathlib import Path


def pdf_bytes(pages: list[str]) -> bytes:
    """
    A PDF with one page per text (a text layer in Helvetica, one line per page; an empty text makes a page without
    content), built by hand so that the text layer is known exactly.
    """
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", None, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode() if text else b""
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {len(objects)} 0 R >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode())
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def encrypted_pdf_bytes(text: str, password: str) -> bytes:
    """A one-page PDF with a text layer, encrypted with a user password (pypdf's writer)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes([text]))))
    writer.encrypt(user_password=password, owner_password=password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(paragraphs: list[str], table: list[list[str]], new_page: int, title: str) -> bytes:
    """
    A DOCX file written with python-docx: paragraphs, the one at index `new_page` starting a new page (a rendered
    page break, as Word records where its layout broke pages), a table and a title property.
    """
    import docx
    from docx.oxml import OxmlElement

    document = docx.Document()
    for i, text in enumerate(paragraphs):
        paragraph = document.add_paragraph()
        if i == new_page:
            paragraph.add_run()._r.append(OxmlElement("w:lastRenderedPageBreak"))
        paragraph.add_run(text)
    grid = document.add_table(rows=len(table), cols=len(table[0]))
    for row, values in zip(grid.rows, table, strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.core_properties.title = title
    out = io.BytesIO()
    document.save(out)
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
