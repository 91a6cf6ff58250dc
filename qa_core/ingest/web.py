"""HTML files, as Haystack's `HTMLToDocument` converts them: the main text that trafilatura extracts."""

from functools import cache
from typing import Any

from qa_core.ingest.report import BadInput

# Elements whose text is never shown, left out of the fallback's text.
_HIDDEN = "//script | //style | //noscript | //template"


def convert_html(data: bytes) -> tuple[str, dict]:
    """
    An HTML page's main text: `trafilatura.extract` on the raw bytes (trafilatura detects the encoding), as
    `HTMLToDocument` does. Where it extracts nothing (a page that is all navigation, footer or aside, which Haystack
    skips with a warning), the fallback is the text of the page's body as lxml reads it, scripts, styles, noscript
    and templates left out, whitespace runs made one space (trafilatura's own `html2txt` drops the same boilerplate
    and so finds nothing there either). `meta["html_extraction"]` says which one gave the text: `"trafilatura"` or
    `"body_text"`.

    :returns: The text and its meta (`html_extraction`).
    :raises BadInput: If the page cannot be parsed or neither finds any text.
    """
    from trafilatura import extract

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


def _body_text(data: bytes) -> str:
    import lxml.html

    root = lxml.html.fromstring(data)
    for element in root.xpath(_HIDDEN):
        element.drop_tree()
    body = root.find("body")
    return " ".join((body if body is not None else root).text_content().split())


__all__ = ["convert_html"]
