"""Plain text and Markdown files, as Haystack's `TextFileToDocument` and `MarkdownToDocument` convert them."""

from functools import cache
from typing import Any

from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.sources import Decoded, decode_text


def convert_text(data: bytes, options: ConversionOptions) -> tuple[str, dict]:
    """
    A `.txt` file's text, as `TextFileToDocument` decodes it (UTF-8, a byte order mark kept), or in the encoding
    detected where the bytes are not UTF-8 (`sources.decode_text`), or in `options.encoding`.

    :returns: The text and its meta (`encoding`, `encoding_confidence`).
    :raises BadInput: For binary data, or bytes in no detectable encoding (or not in the one given).
    """
    decoded = decode_text(data, "utf-8", options.encoding)
    return decoded.text, encoding_meta(decoded)


def convert_markdown(data: bytes, options: ConversionOptions) -> tuple[str, dict]:
    """
    A Markdown file as plain text, as `MarkdownToDocument` renders it (markdown-it-py's CommonMark parser with
    mdit_plain's plain-text renderer; `utf-8-sig` first, so a byte order mark is dropped).

    :returns: The text and its meta (`encoding`, `encoding_confidence`).
    :raises BadInput: For binary data, or bytes in no detectable encoding (or not in the one given).
    """
    decoded = decode_text(data, "utf-8-sig", options.encoding)
    return _markdown_parser().render(decoded.text), encoding_meta(decoded)


def encoding_meta(decoded: Decoded) -> dict:
    """A text's meta keys saying how it was decoded: `encoding` and `encoding_confidence`."""
    return {"encoding": decoded.encoding, "encoding_confidence": decoded.confidence}


@cache
def _markdown_parser() -> Any:
    """One parser per process, as `MarkdownToDocument` keeps one per run (building it costs more than a small file)."""
    from markdown_it import MarkdownIt
    from mdit_plain.renderer import RendererPlain

    return MarkdownIt(renderer_cls=RendererPlain)


__all__ = ["convert_markdown", "convert_text", "encoding_meta"]
