"""Plain text and Markdown files, as Haystack's `TextFileToDocument` and `MarkdownToDocument` convert them."""

from functools import cache
from typing import Any

from qa_core.ingest.sources import decode_text


def convert_text(data: bytes) -> tuple[str, dict]:
    """
    A `.txt` file's text, as `TextFileToDocument` decodes it (UTF-8, a byte order mark kept), or in the encoding
    charset-normalizer detects where the bytes are not UTF-8.

    :returns: The text and its meta (`encoding`).
    :raises BadInput: For binary data, or bytes in no detectable encoding.
    """
    text, encoding = decode_text(data, "utf-8")
    return text, {"encoding": encoding}


def convert_markdown(data: bytes) -> tuple[str, dict]:
    """
    A Markdown file as plain text, as `MarkdownToDocument` renders it (markdown-it-py's CommonMark parser with
    mdit_plain's plain-text renderer; `utf-8-sig` first, so a byte order mark is dropped).

    :returns: The text and its meta (`encoding`).
    :raises BadInput: For binary data, or bytes in no detectable encoding.
    """
    text, encoding = decode_text(data, "utf-8-sig")
    return _markdown_parser().render(text), {"encoding": encoding}


@cache
def _markdown_parser() -> Any:
    """One parser per process, as `MarkdownToDocument` keeps one per run (building it costs more than a small file)."""
    from markdown_it import MarkdownIt
    from mdit_plain.renderer import RendererPlain

    return MarkdownIt(renderer_cls=RendererPlain)


__all__ = ["convert_markdown", "convert_text"]
