"""
Files of every format ingestion reads, written with the formats' own libraries or by hand (PDF): the generators the
ingestion benchmarks use (the ingestion tests build on `pdf_bytes`, `docx_bytes` and `write_docx_bomb` too), and
`write_mixed_folder`, the benchmark's folder of them (text from `data/text/`).
"""

import csv
import html
import io
import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from qa_core.local_models import TEXT_FILE

# The extensions `write_mixed_folder` cycles through: one of each format `qa_core.ingest` converts.
EXTENSIONS = (".txt", ".md", ".html", ".pdf", ".docx", ".jsonl", ".csv")


def _pdf_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


_KIDS = 1000  # pages per node of a generated PDF's page tree


def pdf_bytes(pages: list[str]) -> bytes:
    """
    A PDF with one page per text (a text layer in Helvetica, a line per line of the text; an empty text makes a page
    without content), built by hand so that the text layer is known exactly. The pages hang from a two-level page
    tree of `_KIDS` pages a node, as PDF writers split a long document (pypdf refuses an array of more than about
    100,000 elements: one flat list of a 500 MB PDF's pages).
    """
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", None, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    nodes = [len(objects) + 2 * len(pages) + 1 + k for k in range(-(-len(pages) // _KIDS))]  # after the pages
    kids: list[list[str]] = [[] for _ in nodes]
    for index, text in enumerate(pages):
        lines = " T* ".join(f"({_pdf_string(line)}) Tj" for line in text.split("\n"))
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {lines} ET".encode() if text else b""
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent {nodes[index // _KIDS]} 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {len(objects)} 0 R >>"
        )
        kids[index // _KIDS].append(f"{len(objects)} 0 R")
    for node_kids in kids:
        objects.append(f"<< /Type /Pages /Parent 2 0 R /Kids [{' '.join(node_kids)}] /Count {len(node_kids)} >>")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(f'{node} 0 R' for node in nodes)}] /Count {len(pages)} >>"
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


WORD_NAMESPACE = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_BOMB_PARAGRAPH = b"<w:p><w:r><w:t>All work and no play makes a zip bomb.</w:t></w:r></w:p>"


def write_docx_bomb(path: str | Path, unzipped_bytes: int) -> int:
    """
    A DOCX zip bomb at `path`: python-docx's template package whose `word/document.xml` holds one paragraph
    repeated to `unzipped_bytes` (compressed about 1,000 to 1), written a chunk at a time (never whole in memory).

    :returns: The file's size in bytes.
    """
    import zipfile

    template = zipfile.ZipFile(io.BytesIO(docx_bytes(["x"], [["x"]], -1, "")))
    head = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="{WORD_NAMESPACE}"><w:body>'
    tail = b"</w:body></w:document>"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for member in template.infolist():
            if member.filename != "word/document.xml":
                bomb.writestr(member, template.read(member))
                continue
            with bomb.open(member.filename, "w", force_zip64=True) as stream:
                stream.write(head.encode())
                chunk = _BOMB_PARAGRAPH * (2**20 // len(_BOMB_PARAGRAPH))
                for _ in range(max(1, unzipped_bytes // len(chunk))):
                    stream.write(chunk)
                stream.write(tail)
    return Path(path).stat().st_size


@lru_cache(maxsize=1)
def _words() -> tuple[list[str], list[str]]:
    """The local text's words (ASCII only, so that the PDFs' Helvetica text layer holds them) and its titles."""
    with TEXT_FILE.open(encoding="utf-8") as file:
        records = [json.loads(line) for line in file]
    words = " ".join(record["text"] for record in records).encode("ascii", "ignore").decode().split()
    return words, [record["title"] for record in records]


class _Text:
    """Random passages of consecutive words of the local text, and titles, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.words, self.titles = _words()

    def passage(self, low: int, high: int) -> str:
        n = int(self.rng.integers(low, high))
        start = int(self.rng.integers(0, len(self.words) - n))
        return " ".join(self.words[start : start + n])

    def title(self) -> str:
        return self.titles[int(self.rng.integers(0, len(self.titles)))]

    def count(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high))


def _lines(text: str, words_per_line: int = 12) -> str:
    words = text.split()
    return "\n".join(" ".join(words[i : i + words_per_line]) for i in range(0, len(words), words_per_line))


def _file(kind: str, text: _Text) -> bytes:
    title = text.title()
    if kind == ".txt":
        return "\n\n".join(text.passage(40, 160) for _ in range(text.count(1, 4))).encode() + b"\n"
    if kind == ".md":
        items = "\n".join(f"- {text.passage(3, 10)}" for _ in range(text.count(2, 5)))
        return f"# {title}\n\nSome *{text.passage(2, 5)}* and more: {text.passage(30, 120)}\n\n{items}\n".encode()
    if kind == ".html":
        paragraphs = "".join(f"<p>{html.escape(text.passage(30, 90))}</p>\n" for _ in range(text.count(2, 5)))
        return (
            f"<html><head><title>{html.escape(title)}</title></head><body>\n<nav>Home | About | Contact</nav>\n"
            f"<article><h1>{html.escape(title)}</h1>\n{paragraphs}</article><footer>Copyright footer</footer>"
            "</body></html>\n"
        ).encode()
    if kind == ".pdf":
        return pdf_bytes([_lines(text.passage(40, 150)) for _ in range(text.count(1, 4))])
    if kind == ".docx":
        paragraphs = [text.passage(20, 80) for _ in range(text.count(2, 5))]
        table = [["name", "value"], [text.passage(1, 3), text.passage(1, 3)]]
        return docx_bytes(paragraphs, table, len(paragraphs) - 1, title)
    rows = [{"content": text.passage(20, 80), "topic": title} for _ in range(text.count(3, 10))]
    if kind == ".jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows).encode()
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=["content", "topic"])
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def write_mixed_folder(root: str | Path, files: int, seed: int = 0) -> dict[str, int]:
    """
    `files` small files under `root`, the formats in turn (`EXTENSIONS`), one subfolder per format
    (`txt/00000.txt`, `md/00001.md`, ...): text of 1 to 3 paragraphs, Markdown with a heading, emphasis and a list,
    HTML articles with navigation and a footer, PDFs of 1 to 3 pages, DOCX files with paragraphs, a page break and a
    table, and JSONL and CSV files of 3 to 9 rows (`content`, `topic`), all from the local text, seeded.

    :returns: Relative path -> size in bytes.
    """
    root, text, written = Path(root), _Text(seed), {}
    for i in range(files):
        kind = EXTENSIONS[i % len(EXTENSIONS)]
        path = f"{kind[1:]}/{i:05d}{kind}"
        data = _file(kind, text)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        written[path] = len(data)
    return written


__all__ = ["EXTENSIONS", "docx_bytes", "pdf_bytes", "write_large_pdf", "write_mixed_folder"]


def write_large_pdf(path: str | Path, megabytes: float, seed: int = 0) -> int:
    """
    One PDF of about `megabytes` MB under `path`: pages of 2,000 to 2,800 of the local text's words (dense pages:
    pypdf, and so Haystack's `PyPDFToDocument`, refuses a PDF of more than 100,000 pages; 500 MB make about 33,000
    pages of these); returns its size.
    """
    text = _Text(seed)
    pages, size = [], 0
    while size < megabytes * 1e6:
        pages.append(_lines(text.passage(2000, 2800)))
        size += len(pages[-1]) + 40  # a page's text, its line operators and its page objects, about
    data = pdf_bytes(pages)
    Path(path).write_bytes(data)
    return len(data)
