"""HTML files, as Haystack's `HTMLToDocument` converts them: the main text that trafilatura extracts."""

from functools import cache
from typing import Any

from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.report import BadInput

# Elements whose text is never shown, left out of the fallback's text.
_HIDDEN = "//script | //style | //noscript | //template"
# The longest text node libxml2 keeps (XML_MAX_TEXT_LENGTH) without its `huge_tree` option: it drops a longer one,
# which trafilatura and lxml then read as no text at all.
LIBXML2_MAX_TEXT = 10_000_000


def convert_html(data: bytes, options: ConversionOptions | None = None) -> tuple[str, dict]:
    """
    An HTML page's main text: `trafilatura.extract` on the raw bytes (trafilatura detects the encoding), as
    `HTMLToDocument` does. Where it extracts nothing (a page that is all navigation, footer or aside, which Haystack
    skips with a warning), the fallback is the text of the page's body as lxml reads it, scripts, styles, noscript
    and templates left out, whitespace runs made one space (trafilatura's own `html2txt` drops the same boilerplate
    and so finds nothing there either). `meta["html_extraction"]` says which one gave the text: `"trafilatura"` or
    `"body_text"`.

    :param options: Unused (HTML's encoding is trafilatura's to detect); the converters' common signature.
    :returns: The text and its meta (`html_extraction`).
    :raises BadInput: If the page holds a text node libxml2 would drop (`LIBXML2_MAX_TEXT`), cannot be parsed, or
        neither finds any text.
    """
    from trafilatura import extract

    longest = _long_text_run(data, LIBXML2_MAX_TEXT)
    if longest:
        raise BadInput(
            f"HTML with a text node too large: {longest:,} bytes between two tags, over libxml2's limit of "
            f"{LIBXML2_MAX_TEXT:,} for one text node, which its parser drops; not converted"
        )
    try:
        text = extract(data, options=_extractor())
        if text:
            return text, {"html_extraction": "trafilatura"}
        text = _body_text(data)
    except Exception as error:  # trafilatura and lxml raise their own errors on broken markup
        raise BadInput(f"HTML that cannot be parsed: {type(error).__name__}: {error}") from error
    if not text:
        raise BadInput("HTML without text: trafilatura extracts nothing and the page's body holds no text")
    return text, {"html_extraction": "body_text"}


@cache
def _extractor() -> Any:
    """
    trafilatura's options with `extract`'s defaults, built once per process (`extract` builds them, reading its
    configuration, on every call: a tenth of a small page's time); trafilatura shares one across calls itself.
    """
    from trafilatura.settings import Extractor

    return Extractor()


def _long_text_run(data: bytes, shortest: int) -> int:
    """
    The length of a run of bytes without a `<` (an upper bound of a text node's) longer than `shortest` in `data`,
    or 0 where there is none. Such a run holds a whole window of `shortest // 2` bytes aligned on that size, so only
    windows are searched (a few `find`s for any page), and no copy of `data` is made.
    """
    step = max(1, shortest // 2)
    for offset in range(0, len(data), step):
        if data.find(b"<", offset, offset + step) < 0:
            start = data.rfind(b"<", 0, offset) + 1
            end = data.find(b"<", offset)
            length = (len(data) if end < 0 else end) - start
            if length > shortest:
                return length
    return 0


def _body_text(data: bytes) -> str:
    import lxml.html

    root = lxml.html.fromstring(data)
    for element in root.xpath(_HIDDEN):
        element.drop_tree()
    body = root.find("body")
    return " ".join((body if body is not None else root).text_content().split())


__all__ = ["convert_html"]
