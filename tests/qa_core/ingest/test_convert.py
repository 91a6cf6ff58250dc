"""
Converters: on files of every format, the content and meta equal Haystack's converter's on the same file (ours
adding `format`, `size_bytes`, `pages` and the format's extras), the ids are derived from the relative paths, and
every kind of bad input becomes a report row instead of an exception or a silent drop.
"""

import json
import os
from pathlib import Path

import pytest
from haystack.components.converters import (
    CSVToDocument,
    DOCXToDocument,
    HTMLToDocument,
    JSONConverter,
    MarkdownToDocument,
    PyPDFToDocument,
    TextFileToDocument,
)
from haystack.dataclasses import ByteStream

from qa_core.document import Document
from qa_core.ingest import DuplicateIdError, ReportRow, Utf8Document, convert_file, convert_folder
from qa_core.ingest.sources import list_files
from qa_core.ingest.utf8 import Utf8Buffer, decode
from tests.qa_core.ingest.files import (
    FOOTER_HTML,
    LATIN1_TEXT,
    docx_bytes,
    encrypted_pdf_bytes,
    pdf_bytes,
    rich_docx_bytes,
    without_core_properties,
    write_corpus,
)


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """The good files under a temporary root, which is also the working folder (Haystack's `file_path` is then
    the relative path we record)."""
    files = write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    return files


def ours(path: str):
    result = convert_file(".", path)
    assert result.report == []
    return result.documents


def assert_same(path: str, expected, extra_meta: list[dict]) -> None:
    """Our documents of `path` have Haystack's content, and Haystack's meta plus `extra_meta` (one per document)."""
    documents = ours(path)
    assert [doc.content for doc in documents] == [doc.content for doc in expected]
    expected_meta = [{**doc.meta, **extra} for doc, extra in zip(expected, extra_meta, strict=True)]
    assert [doc.meta for doc in documents] == expected_meta


def file_meta(path: str, fmt: str, files: dict, **extra) -> dict:
    return {"format": fmt, "size_bytes": len(files[path]), **extra}


def test_txt_equals_text_file_to_document(corpus) -> None:
    expected = TextFileToDocument(store_full_path=True).run(["notes.txt"])["documents"]
    assert expected[0].content == "First line.\nSecond line, café.\n"
    assert_same(
        "notes.txt",
        expected,
        [file_meta("notes.txt", "txt", corpus, pages=1, encoding="utf-8", encoding_confidence=1.0)],
    )


def test_markdown_equals_markdown_to_document(corpus) -> None:
    expected = MarkdownToDocument(store_full_path=True, progress_bar=False).run(["docs/readme.md"])["documents"]
    assert expected[0].content.startswith("Title\n\nSome emphasis and a link.\n\nitem one\nitem two")
    meta = file_meta("docs/readme.md", "markdown", corpus, pages=1, encoding="utf-8-sig", encoding_confidence=1.0)
    assert_same("docs/readme.md", expected, [meta])


def test_html_equals_html_to_document(corpus) -> None:
    expected = HTMLToDocument(store_full_path=True).run(["web/page.html"])["documents"]
    assert expected[0].content.startswith("The main article\nThe extractive reader finds")
    meta = file_meta("web/page.html", "html", corpus, pages=1, html_extraction="trafilatura")
    assert_same("web/page.html", expected, [meta])


def test_html_trafilatura_skips_falls_back_to_the_body_text(corpus) -> None:
    assert HTMLToDocument().run(["web/footer.htm"])["documents"] == []
    [doc] = ours("web/footer.htm")
    assert (doc.content, doc.meta["html_extraction"]) == ("Only a footer here", "body_text")
    assert FOOTER_HTML.count("alert") == 1 and "alert" not in doc.content


def test_pdf_equals_pypdf_to_document_with_empty_pages_kept(corpus) -> None:
    expected = PyPDFToDocument(store_full_path=True).run(["report.pdf"])["documents"]
    assert expected[0].content == "Page one text.\f\fPage three text."
    assert_same("report.pdf", expected, [file_meta("report.pdf", "pdf", corpus, pages=3)])


def test_a_pdf_is_read_from_its_file_in_small_reads_its_text_equal_to_pypdf_to_documents(tmp_path) -> None:
    """Pages released after extraction (pypdf rereads a shared font) and the file never read whole."""
    import io

    from qa_core.ingest.pdf import convert_pdf

    data = pdf_bytes([f"Page {i}: caf\u00e9 words’ (quoted) text." * 20 if i % 7 else "" for i in range(150)])
    [expected] = PyPDFToDocument().run([ByteStream(data)])["documents"]

    class Spy(io.BytesIO):
        largest = 0

        def read(self, size=-1):
            out = super().read(size)
            Spy.largest = max(Spy.largest, len(out))
            return out

    assert convert_pdf(Spy(data)) == (expected.content, {"pages": 150})
    assert expected.content.count("\f") == 149 and max(expected.content) > "\u00ff"  # a wide `str`
    assert Spy.largest <= 8192 < len(data)


def test_a_pdf_over_utf8_above_stays_utf8_its_text_equal_to_pypdf_to_documents(tmp_path) -> None:
    """300 pages: past the pages between two of the converter's collections of pypdf's objects."""
    data = pdf_bytes([f"Page {i}: caf\u00e9 words\u2019 text." * 3 if i % 7 else "" for i in range(300)])
    (tmp_path / "big.pdf").write_bytes(data)
    [expected] = PyPDFToDocument().run([ByteStream(data)])["documents"]
    [whole] = convert_file(str(tmp_path), "big.pdf", utf8_above=len(data)).documents  # not above: a `Document`
    [large] = convert_file(str(tmp_path), "big.pdf", utf8_above=len(data) - 1).documents
    assert isinstance(whole, Document) and isinstance(large, Utf8Document)
    assert decode(large.content) == whole.content == expected.content
    assert (large.id, large.meta) == (whole.id, whole.meta) and large.meta["pages"] == 300


def test_a_utf8_buffer_grown_past_its_capacity_keeps_every_text() -> None:
    buffer = Utf8Buffer(capacity=1)
    texts = ["caf\u00e9 ", "\ud800", "x" * 5000, "\u2019" * 3000, "\f", "end"]  # a lone surrogate kept
    for text in texts:
        buffer.append(text)
    assert decode(buffer.view()) == "".join(texts)


def test_docx_equals_docx_to_document(corpus) -> None:
    expected = DOCXToDocument(store_full_path=True).run(["letter.docx"])["documents"]
    assert expected[0].content == 'Dear reader,\n\fSecond page starts here.\nBye.\na,b\r\n1,"2,3"'
    assert expected[0].meta["docx"]["title"] == "A letter"
    assert_same("letter.docx", expected, [file_meta("letter.docx", "docx", corpus, pages=2)])


def test_docx_of_every_element_equals_docx_to_document_read_from_two_parts(tmp_path, monkeypatch) -> None:
    """Empty paragraphs, breaks, page breaks (two in a paragraph, one in a link), merged and nested tables, a text
    box and a comment: read from the main document and core properties parts alone, as Haystack reads them."""
    data = rich_docx_bytes()
    (tmp_path / "rich.docx").write_bytes(data)
    monkeypatch.chdir(tmp_path)
    expected = DOCXToDocument(store_full_path=True).run(["rich.docx"])["documents"]
    assert expected[0].content.startswith("\nTab\there,\na new line.\nBefore\fbetweenafter.\f\nLinked: link text\f")
    assert "Boxed text.\nbox cell\n" in expected[0].content and expected[0].content.count("Boxed") == 1
    monkeypatch.setattr("docx.Document", None)  # python-docx's whole-package reader is not used
    extra = file_meta("rich.docx", "docx", {"rich.docx": data}, pages=4)
    assert_same("rich.docx", expected, [extra])


def test_docx_without_core_properties_is_read_by_python_docx_as_haystack_reads_it(tmp_path) -> None:
    data = without_core_properties(docx_bytes(["One", "Two"], [["a"]], 1, "ignored"))
    [expected] = DOCXToDocument().run([ByteStream(data)])["documents"]
    (tmp_path / "bare.docx").write_bytes(data)
    [doc] = convert_file(str(tmp_path), "bare.docx").documents
    assert doc.content == expected.content == "One\n\fTwo\na"
    assert doc.meta["docx"]["title"] == expected.meta["docx"]["title"] == "Word Document"  # python-docx's default


def test_jsonl_lines_equal_json_converter(corpus) -> None:
    converter = JSONConverter(content_key="content", extra_meta_fields="*", store_full_path=True)
    lines = corpus["rows.jsonl"].decode().splitlines()
    expected = [
        converter.run([ByteStream(line.encode(), meta={"file_path": "rows.jsonl"})])["documents"][0] for line in lines
    ]
    extra = [
        file_meta("rows.jsonl", "jsonl", corpus, encoding="utf-8-sig", encoding_confidence=1.0, line=i, pages=1)
        for i in (1, 2)
    ]
    assert_same("rows.jsonl", expected, extra)
    assert [doc.id for doc in ours("rows.jsonl")] == ["rows.jsonl#1", "custom-7"]


def test_csv_rows_equal_csv_to_document_row_mode(corpus) -> None:
    converter = CSVToDocument(conversion_mode="row", store_full_path=True)
    expected = converter.run(["table.csv"], content_column="content")["documents"]
    assert [doc.content for doc in expected] == ["Quoted, with a comma", "Second row"]
    extra = [
        file_meta("table.csv", "csv", corpus, encoding="utf-8-sig", encoding_confidence=1.0, line=i, pages=1)
        for i in (2, 3)
    ]
    assert_same("table.csv", expected, extra)
    assert [doc.id for doc in ours("table.csv")] == ["c1", "table.csv#3"]


def test_text_that_is_not_utf8_is_decoded_in_the_detected_encoding(corpus) -> None:
    assert TextFileToDocument().run(["latin1.txt"])["documents"] == []  # Haystack's UTF-8 fails: skipped
    expected = TextFileToDocument(encoding="latin-1", store_full_path=True).run(["latin1.txt"])["documents"]
    [doc] = ours("latin1.txt")
    assert expected[0].content == LATIN1_TEXT
    assert (doc.content, doc.meta["encoding"], doc.meta["encoding_confidence"]) == (LATIN1_TEXT, "cp1252", 1.0)


def test_utf16_text_with_a_byte_order_mark_is_text_not_binary(tmp_path) -> None:
    (tmp_path / "wide.txt").write_bytes("Wide text, ça va?".encode("utf-16"))
    [doc] = convert_file(str(tmp_path), "wide.txt").documents
    assert (doc.content, doc.meta["encoding"]) == ("Wide text, ça va?", "utf_16")


def test_folder_ids_are_relative_paths_and_stable(corpus) -> None:
    result = convert_folder(".")
    assert result.files == sorted(corpus)
    assert result.report == []
    assert [doc.id for doc in result.documents] == [
        "docs/readme.md", "latin1.txt", "letter.docx", "notes.txt", "report.pdf", "rows.jsonl#1", "custom-7",
        "c1", "table.csv#3", "web/footer.htm", "web/page.html",
    ]  # fmt: skip
    assert [doc.id for doc in convert_folder(".").documents] == [doc.id for doc in result.documents]


# One test per bad-input reason: each is a report row (path, line, reason), never an exception, never a document.


def report_of(tmp_path: Path, files: dict[str, bytes]) -> list[ReportRow]:
    for path, data in files.items():
        (tmp_path / path).write_bytes(data)
    result = convert_folder(str(tmp_path))
    assert result.documents == []
    return result.report


def test_corrupt_pdf(tmp_path) -> None:
    [row] = report_of(tmp_path, {"bad.pdf": b"%PDF-1.4\nnot really a pdf"})
    assert (row.path, row.line) == ("bad.pdf", None)
    assert row.reason.startswith("PDF that pypdf cannot read (corrupt or truncated?): ")


def test_truncated_pdf(tmp_path) -> None:
    [row] = report_of(tmp_path, {"cut.pdf": pdf_bytes(["Some text."])[:150]})
    assert row.reason.startswith("PDF that pypdf cannot read (corrupt or truncated?): ")


def test_encrypted_pdf(tmp_path) -> None:
    assert report_of(tmp_path, {"secret.pdf": encrypted_pdf_bytes("Hidden text.", "pw")}) == [
        ReportRow("secret.pdf", None, "encrypted PDF: it cannot be opened without a password")
    ]


def test_pdf_without_a_text_layer(tmp_path) -> None:
    assert report_of(tmp_path, {"scan.pdf": pdf_bytes(["", ""])}) == [
        ReportRow("scan.pdf", None, "PDF without a text layer: none of its 2 pages holds text (scanned? run OCR first)")
    ]


@pytest.mark.parametrize("utf8_above", [None, 0])
def test_a_pdf_whose_text_holds_a_lone_surrogate_is_reported_not_converted(tmp_path, monkeypatch, utf8_above) -> None:
    from pypdf import PageObject

    extract_text = PageObject.extract_text
    texts = iter(["Fine text.", "Broken \ud835 font map."])  # the second page's text, as a bad ToUnicode map gives it
    monkeypatch.setattr(PageObject, "extract_text", lambda page, **options: extract_text(page, **options) + next(texts))
    (tmp_path / "fonts.pdf").write_bytes(pdf_bytes(["One.", "Two."]))
    result = convert_file(str(tmp_path), "fonts.pdf", utf8_above=utf8_above)
    assert result.documents == []
    assert result.report == [
        ReportRow(
            "fonts.pdf",
            None,
            "PDF whose text is not Unicode: page 2 holds a lone surrogate code point (a broken font map), which no "
            "UTF-8 text can store",
        )
    ]


def test_binary_bytes_under_a_text_extension(tmp_path) -> None:
    binary = bytes(range(256)) * 4
    assert report_of(tmp_path, {"blob.txt": binary, "blob.md": binary, "blob.jsonl": binary}) == [
        ReportRow(path, None, "binary data (NUL bytes) under a text file extension")
        for path in ("blob.jsonl", "blob.md", "blob.txt")
    ]


def test_empty_file(tmp_path) -> None:
    assert report_of(tmp_path, {"empty.txt": b"", "empty.pdf": b""}) == [
        ReportRow("empty.pdf", None, "empty file"),
        ReportRow("empty.txt", None, "empty file"),
    ]


def test_blank_text(tmp_path) -> None:
    assert report_of(tmp_path, {"blank.txt": b" \n\t\n"}) == [
        ReportRow("blank.txt", None, "no text: the file converts to blank text")
    ]


def test_html_without_text(tmp_path) -> None:
    assert report_of(tmp_path, {"empty.html": b"<html><body><script>x()</script></body></html>"}) == [
        ReportRow(
            "empty.html", None, "HTML without text: trafilatura extracts nothing and the page's body holds no text"
        )
    ]


def test_corrupt_docx(tmp_path) -> None:
    [row] = report_of(tmp_path, {"bad.docx": b"PK\x03\x04 not a zip"})
    assert (row.path, row.line) == ("bad.docx", None)
    assert row.reason.startswith("DOCX that python-docx cannot read (corrupt?): ")


def test_malformed_jsonl_lines(tmp_path) -> None:
    lines = ['{"content": "good"}', "{not json", "[1, 2]", '{"text": "no content key"}', '{"content": 3}', "",
             '{"content": "  "}']  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    result = convert_folder(str(tmp_path))
    assert [doc.content for doc in result.documents] == ["good"]
    assert result.report == [
        ReportRow("rows.jsonl", 2, "malformed JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),  # noqa: E501
        ReportRow("rows.jsonl", 3, "a JSON list, not an object"),
        ReportRow("rows.jsonl", 4, "no content column 'content'"),
        ReportRow("rows.jsonl", 5, "content column 'content' holds int, not text"),
        ReportRow("rows.jsonl", 7, "empty content in column 'content'"),
    ]  # fmt: skip


def test_jsonl_lines_end_at_newlines_only(tmp_path) -> None:
    content = "page one\fpage two\u2028same line\r"
    (tmp_path / "r.jsonl").write_text(json.dumps({"content": content}, ensure_ascii=False) + "\r\n")
    [doc] = convert_folder(str(tmp_path)).documents
    assert (doc.content, doc.meta["pages"], doc.id) == (content, 2, "r.jsonl#1")


def test_malformed_csv_rows(tmp_path) -> None:
    (tmp_path / "t.csv").write_text('content,n\ngood,1\ntoo,many,fields\nshort\n"multi\nline",2\n,3\n')
    result = convert_folder(str(tmp_path))
    assert [(doc.content, doc.meta["line"], doc.meta["row_number"]) for doc in result.documents] == [
        ("good", 2, 0),
        ("multi\nline", 5, 3),
    ]
    assert result.report == [
        ReportRow("t.csv", 3, "malformed CSV record: 3 fields, the header has 2"),
        ReportRow("t.csv", 4, "malformed CSV record: 1 fields, the header has 2"),
        ReportRow("t.csv", 7, "empty content in column 'content'"),
    ]


def test_csv_without_the_content_column(tmp_path) -> None:
    assert report_of(tmp_path, {"t.csv": b"text,n\nx,1\n"}) == [
        ReportRow("t.csv", None, "CSV without the content column 'content' in its header ['text', 'n']")
    ]


def test_rows_file_without_rows(tmp_path) -> None:
    assert report_of(tmp_path, {"t.csv": b"content,n\n", "r.jsonl": b"\n\n"}) == [
        ReportRow("r.jsonl", None, "no rows: the file holds only blank lines or a header"),
        ReportRow("t.csv", None, "no rows: the file holds only blank lines or a header"),
    ]


def test_unknown_extension(tmp_path) -> None:
    [row] = report_of(tmp_path, {"image.png": b"\x89PNG"})
    assert (row.path, row.line) == ("image.png", None)
    assert row.reason == "unknown file extension (known: .csv, .docx, .htm, .html, .jsonl, .markdown, .md, .pdf, .txt)"


def test_a_file_gone_since_it_was_listed(tmp_path) -> None:
    result = convert_file(str(tmp_path), "gone.txt")
    assert result.report == [ReportRow("gone.txt", None, "cannot read the file: No such file or directory")]


def test_text_in_no_detectable_encoding(tmp_path) -> None:
    assert report_of(tmp_path, {"noise.txt": bytes(range(1, 256)) * 4}) == [
        ReportRow("noise.txt", None, "not utf-8 text, and no text encoding could be detected (binary data?)")
    ]


def test_file_that_cannot_be_read(tmp_path, monkeypatch) -> None:
    """A read refused by the system (as for a file without read permission, which root would still read)."""
    (tmp_path / "locked.txt").write_text("secret")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "open", refuse)
    assert report_of(tmp_path, {}) == [ReportRow("locked.txt", None, "cannot read the file: Permission denied")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_file_without_read_permission(tmp_path) -> None:
    (tmp_path / "locked.txt").write_text("secret")
    (tmp_path / "locked.txt").chmod(0)
    assert report_of(tmp_path, {}) == [ReportRow("locked.txt", None, "cannot read the file: Permission denied")]


def test_two_sources_of_one_id_are_an_error_naming_both(tmp_path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "x", "content": "one"}) + "\n")
    (tmp_path / "b.csv").write_text("id,content\nx,two\n")
    with pytest.raises(DuplicateIdError, match=r"^Two documents have the id 'x': a.jsonl line 1 and b.csv line 2.$"):
        convert_folder(str(tmp_path))


def test_hidden_files_are_not_listed(tmp_path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.txt").write_text("x")
    (tmp_path / ".hidden.txt").write_text("x")
    (tmp_path / "seen.txt").write_text("x")
    assert list_files(tmp_path) == ["seen.txt"]


def test_a_docx_page_break_is_a_form_feed(tmp_path) -> None:
    (tmp_path / "d.docx").write_bytes(docx_bytes(["One", "Two", "Three"], [["h"]], 2, ""))
    [doc] = convert_folder(str(tmp_path)).documents
    assert (doc.content, doc.meta["pages"]) == ("One\nTwo\n\fThree\nh", 2)


def test_a_column_named_like_our_meta_is_prefixed_as_haystack_prefixes_it(tmp_path) -> None:
    (tmp_path / "t.csv").write_text("content,file_path,format,line\nx,a,b,c\n")
    (tmp_path / "r.jsonl").write_text(json.dumps({"content": "y", "format": "f", "pages": 9}) + "\n")
    csv_doc, json_doc = sorted(convert_folder(str(tmp_path)).documents, key=lambda doc: doc.meta["format"])
    expected = CSVToDocument(conversion_mode="row").run([str(tmp_path / "t.csv")], content_column="content")
    assert expected["documents"][0].meta["csv_file_path"] == csv_doc.meta["csv_file_path"] == "a"
    assert {key: csv_doc.meta[key] for key in ("format", "csv_format", "line", "csv_line")} == {
        "format": "csv", "csv_format": "b", "line": 2, "csv_line": "c"
    }  # fmt: skip
    assert {key: json_doc.meta[key] for key in ("format", "json_format", "pages", "json_pages")} == {
        "format": "jsonl", "json_format": "f", "pages": 1, "json_pages": 9
    }  # fmt: skip


def test_rows_read_as_a_stream_or_whole_where_the_encoding_is_detected(tmp_path) -> None:
    """JSONL and CSV files are decoded line by line when they are UTF-8 (a byte order mark dropped), and whole in the
    detected encoding otherwise; JSON's messages name the line's own columns either way."""
    rows = [{"content": "Größe über Straße: ça va?"}, {"content": "Äpfel und Öl."}]
    jsonl = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows) + '{"content": \n'
    (tmp_path / "utf8.jsonl").write_bytes(b"\xef\xbb\xbf" + jsonl.encode())
    (tmp_path / "latin1.jsonl").write_bytes(jsonl.encode("latin-1"))
    (tmp_path / "latin1.csv").write_bytes(("content\n" + "\n".join(row["content"] for row in rows)).encode("latin-1"))
    result = convert_folder(str(tmp_path))
    assert [(doc.id, doc.content, doc.meta["encoding"]) for doc in result.documents] == [
        ("latin1.csv#2", rows[0]["content"], "cp1252"), ("latin1.csv#3", rows[1]["content"], "cp1252"),
        ("latin1.jsonl#1", rows[0]["content"], "cp1252"), ("latin1.jsonl#2", rows[1]["content"], "cp1252"),
        ("utf8.jsonl#1", rows[0]["content"], "utf-8-sig"), ("utf8.jsonl#2", rows[1]["content"], "utf-8-sig"),
    ]  # fmt: skip
    reason = "malformed JSON: Expecting value: line 1 column 13 (char 12)"
    assert result.report == [ReportRow("latin1.jsonl", 3, reason), ReportRow("utf8.jsonl", 3, reason)]
