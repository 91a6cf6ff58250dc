"""
Hostile and messy files (generated here): limits a converter cannot escape (its process killed at the time limit,
its address space capped), zip bombs, text too large, libxml2's dropped text nodes, DOCX entity references, and
Western European text in Latin-1 or Windows-1252. Each gives the report row that says what happened.
"""

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from jobs.bench.files import pdf_bytes, write_docx_bomb
from qa_core.ingest import ConversionOptions, ReportRow, convert_file
from qa_core.ingest.converter_process import shared_converter
from tests.qa_core.ingest.files import docx_with_entity, slow_html

TIME_LIMIT_S = 1.5
KILL_SLACK_S = 1.0  # the kill, the report and a loaded machine's scheduling


@pytest.fixture
def warm_converter(tmp_path: Path) -> ConversionOptions:
    """This process's converter process, started (its start is not a file's time), and the options that use it."""
    options = ConversionOptions(timeout_s=TIME_LIMIT_S, memory_bytes=2 * 2**30)
    (tmp_path / "warm.txt").write_text("warm\n")
    assert convert_file(str(tmp_path), "warm.txt", options=options).documents[0].content == "warm\n"
    return options


def test_html_that_keeps_trafilatura_in_c_for_seconds_is_killed_at_the_time_limit(tmp_path, warm_converter) -> None:
    """200 KB of one-cell tables on one line: 12 s unbounded on a shared 2-core machine, much of it in libxml2."""
    (tmp_path / "slow.html").write_bytes(slow_html(200_000))
    started = time.monotonic()
    result = convert_file(str(tmp_path), "slow.html", options=warm_converter)
    elapsed = time.monotonic() - started
    reason = "conversion took longer than the limit of 1.5 s (--timeout-per-file): stopped"
    assert (result.documents, result.report) == ([], [ReportRow("slow.html", None, reason)])
    assert TIME_LIMIT_S <= elapsed < TIME_LIMIT_S + KILL_SLACK_S
    (tmp_path / "after.txt").write_text("next\n")  # a fresh process converts the next file
    assert convert_file(str(tmp_path), "after.txt", options=warm_converter).documents[0].content == "next\n"


def test_a_converter_process_that_dies_is_a_report_row_and_replaced(tmp_path, warm_converter) -> None:
    """Killed from outside (as the kernel's out-of-memory killer would) in the middle of a file."""
    import os
    import signal
    import threading

    (tmp_path / "slow.html").write_bytes(slow_html(200_000))
    options = replace(warm_converter, timeout_s=30.0)
    pid = shared_converter().pid
    threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
    result = convert_file(str(tmp_path), "slow.html", options=options)
    reason = "the converter's process died converting it (exit status -9)"
    assert (result.documents, result.report) == ([], [ReportRow("slow.html", None, reason)])
    (tmp_path / "after.txt").write_text("next\n")
    assert convert_file(str(tmp_path), "after.txt", options=options).documents[0].content == "next\n"
    assert shared_converter().pid != pid


def test_a_memory_blow_up_is_a_report_row_not_a_swap(tmp_path) -> None:
    """A DOCX of 32 MB of paragraphs, no decompressed-size limit: python-docx's tree outgrows a 300 MiB process."""
    write_docx_bomb(tmp_path / "big.docx", 32 * 2**20)
    options = ConversionOptions(timeout_s=60.0, memory_bytes=300 * 2**20)
    result = convert_file(str(tmp_path), "big.docx", options=options)
    reason = "conversion needed more memory than the limit of 314,572,800 bytes (--memory-per-file): stopped"
    assert (result.documents, result.report) == ([], [ReportRow("big.docx", None, reason)])


def test_a_docx_zip_bomb_is_reported_by_its_decompressed_size_never_inflated(tmp_path, warm_converter) -> None:
    """200 MB of document.xml in a ~1 MB file: refused before any part is parsed, within a 2 GiB process."""
    size = write_docx_bomb(tmp_path / "bomb.docx", 200 * 2**20)
    assert size < 2 * 2**20
    options = ConversionOptions(timeout_s=30.0, memory_bytes=2 * 2**30, max_unzipped_bytes=16 * 2**20)
    [row] = convert_file(str(tmp_path), "bomb.docx", options=options).report
    assert row.reason == (
        "zip package (DOCX) that declares 210,530,391 bytes decompressed, over the limit of 16,777,216 bytes "
        "(--max-unzipped-bytes): a zip bomb? not converted"
    )


def test_a_docx_whose_directory_lies_about_its_sizes_never_inflates_past_them(tmp_path) -> None:
    """
    A 200 MB bomb whose sizes are declared 1 KB: zipfile stops each member at its declared size and its checksum
    fails, so it is a corrupt file, converted within 300 MiB (200 MB of XML inflated and parsed would take more).
    """
    write_docx_bomb(tmp_path / "bomb.docx", 200 * 2**20)
    (tmp_path / "liar.docx").write_bytes(_declare_small_sizes((tmp_path / "bomb.docx").read_bytes()))
    options = ConversionOptions(timeout_s=30.0, memory_bytes=300 * 2**20, max_unzipped_bytes=16 * 2**20)
    [row] = convert_file(str(tmp_path), "liar.docx", options=options).report
    assert row.reason.startswith("DOCX that python-docx cannot read (corrupt?): BadZipFile: Bad CRC-32 for file ")


def _declare_small_sizes(data: bytes) -> bytes:
    """A zip whose every member's uncompressed size says 1,024 bytes, in its local headers and its directory."""
    import struct
    import zipfile

    out = bytearray(data)
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as archive:
        for member in archive.infolist():
            struct.pack_into("<I", out, member.header_offset + 22, 1024)  # local header: uncompressed size
    start = 0
    while (start := out.find(b"PK\x01\x02", start)) >= 0:  # central directory entries
        struct.pack_into("<I", out, start + 24, 1024)
        start += 4
    return bytes(out)


def test_a_text_node_over_libxml2s_limit_is_reported_as_such(tmp_path) -> None:
    """libxml2 drops a text node over 10 MB: trafilatura and lxml would see a page without text."""
    (tmp_path / "huge.html").write_bytes(b"<html><body><p>" + b"word " * 2_100_000 + b"</p></body></html>")
    [row] = convert_file(str(tmp_path), "huge.html").report
    assert row == ReportRow(
        "huge.html",
        None,
        "HTML with a text node too large: 10,500,002 bytes between two tags, over libxml2's limit of 10,000,000 "
        "for one text node, which its parser drops; not converted",
    )


def test_a_docx_entity_reference_is_reported_not_dropped_silently(tmp_path) -> None:
    (tmp_path / "entity.docx").write_bytes(docx_with_entity("Before the entity, ", "xxe", " and after it."))
    assert convert_file(str(tmp_path), "entity.docx").report == [
        ReportRow(
            "entity.docx",
            None,
            "DOCX whose text holds the XML entity reference &xxe;: entity dropped (never expanded: it could read a "
            "file), and the rest of its text element with it; not converted",
        )
    ]


def test_text_over_max_document_bytes_is_reported_and_the_rest_not_read(tmp_path) -> None:
    limit = 1_000
    options = ConversionOptions(max_document_bytes=limit)
    (tmp_path / "long.txt").write_text("x" * 5_000)
    (tmp_path / "short.txt").write_text("x" * 1_000)
    (tmp_path / "wide.txt").write_bytes(("x" * 800).encode("utf-16"))  # 1,602 bytes, 800 as UTF-8: it fits
    rows = [{"content": "y" * 2_000}, {"content": "fits"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "pages.pdf").write_bytes(pdf_bytes(["z" * 600, "z" * 600, "z" * 600]))
    (tmp_path / "page.html").write_bytes(b"<html><body><article><p>" + b"w " * 1_000 + b"</p></article></body></html>")
    results = {path: convert_file(str(tmp_path), path, options=options) for path in
               ("long.txt", "short.txt", "wide.txt", "rows.jsonl", "pages.pdf", "page.html")}  # fmt: skip
    assert results["long.txt"].report == [
        ReportRow(
            "long.txt",
            None,
            "text over the limit of 1,000 bytes for one document (--max-document-bytes): the rest of the file not read",
        )
    ]
    assert [doc.content for doc in results["short.txt"].documents] == ["x" * 1_000]
    assert [doc.content for doc in results["wide.txt"].documents] == ["x" * 800]
    assert [doc.content for doc in results["rows.jsonl"].documents] == ["fits"]
    too_large = "text of 2,000 bytes, over the limit of 1,000 bytes for one document (--max-document-bytes)"
    assert results["rows.jsonl"].report == [ReportRow("rows.jsonl", 1, too_large)]
    assert results["pages.pdf"].report == [
        ReportRow(
            "pages.pdf",
            None,
            "text over the limit of 1,000 bytes for one document (--max-document-bytes) at page 2 of 3: the rest "
            "of the file not read",
        )
    ]
    too_large_html = "text of 1,999 bytes, over the limit of 1,000 bytes for one document (--max-document-bytes)"
    assert results["page.html"].report == [ReportRow("page.html", None, too_large_html)]


WESTERN = {
    "french.txt": "Le café de la gare ferme à minuit. L'été dernier, nous sommes allés à la plage où il faisait chaud.",
    "german.txt": "Größe über Straße: Die Bäume blühen früh, während Müller schläft. Äpfel und Öl.",
    "spanish.txt": "El niño comió paella en la pequeña ciudad; ¿dónde está el señor Muñoz? ¡Qué día!",
}


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_western_european_text_is_decoded_exactly_as_windows_1252(tmp_path, encoding) -> None:
    """charset-normalizer alone reads the French as Windows-1250 (`à` as `ŕ`) and names the German so."""
    for path, text in WESTERN.items():
        (tmp_path / path).write_bytes(text.encode(encoding))
    (tmp_path / "quotes.txt").write_bytes("« L’été coûte 5 € », dit-elle — c’est l’œuvre d’un maître.".encode("cp1252"))
    decoded = {path: convert_file(str(tmp_path), path).documents[0] for path in [*WESTERN, "quotes.txt"]}
    assert {path: doc.content for path, doc in decoded.items()} == {
        **WESTERN, "quotes.txt": "« L’été coûte 5 € », dit-elle — c’est l’œuvre d’un maître."
    }  # fmt: skip
    assert {(doc.meta["encoding"], doc.meta["encoding_confidence"]) for doc in decoded.values()} == {("cp1252", 1.0)}


def test_central_european_text_stays_windows_1250(tmp_path) -> None:
    text = "Zażółć gęślą jaźń. Łódź jest dużym miastem w środkowej Polsce, słynie z przemysłu."
    (tmp_path / "polish.txt").write_bytes(text.encode("cp1250"))
    [doc] = convert_file(str(tmp_path), "polish.txt").documents
    assert (doc.content, doc.meta["encoding"], doc.meta["encoding_confidence"]) == (text, "cp1250", 0.881)


def test_the_encoding_given_is_the_only_one_tried(tmp_path) -> None:
    options = ConversionOptions(encoding="cp1250")
    text = "Příliš žluťoučký kůň úpěl ďábelské ódy."
    (tmp_path / "czech.txt").write_bytes(text.encode("cp1250"))
    (tmp_path / "czech.csv").write_bytes(("content\n" + text + "\n").encode("cp1250"))
    (tmp_path / "undefined.txt").write_bytes(b"Bytes \x81 undefined in Windows-1250.")
    [doc] = convert_file(str(tmp_path), "czech.txt", options=options).documents
    assert (doc.content, doc.meta["encoding"], doc.meta["encoding_confidence"]) == (text, "cp1250", 1.0)
    [row] = convert_file(str(tmp_path), "czech.csv", options=options).documents
    assert (row.content, row.meta["encoding"]) == (text, "cp1250")
    assert convert_file(str(tmp_path), "undefined.txt", options=options).report == [
        ReportRow("undefined.txt", None, "not cp1250 text (--encoding cp1250): character maps to <undefined> at byte 6")
    ]


def teardown_module() -> None:
    shared_converter().close()
