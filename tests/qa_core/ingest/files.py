"""Test files of every format: the generators are the ingestion benchmark's (`jobs.bench.files`), shared."""

import io
import json
from pathlib import Path

from jobs.bench.files import docx_bytes, pdf_bytes


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
