"""clean_documents: each DocumentCleaner option alone, and all together, equal to Haystack's DocumentCleaner."""

import pytest
from haystack import Document as HaystackDocument
from haystack.components.preprocessors import DocumentCleaner

from qa_core.document import Document
from qa_core.ingest import CleanerSettings, clean_documents

HEADER = "ACME Corp annual report 2026 confidential"
PAGES = [f"{HEADER}\nPage {i} text  with   extra spaces.\n\n  \nCafé ﬁne naïve.\nFooter here now" for i in range(5)]
TEXTS = ["\f".join(PAGES), "  Lone  text\n\n\nwith blank lines  ", "x\f\fy", ""]

OFF = {"remove_empty_lines": False, "remove_extra_whitespaces": False, "remove_repeated_substrings": False}
OPTIONS = [
    {},
    {"unicode_normalization": "NFKC"},
    {"ascii_only": True},
    {"remove_extra_whitespaces": True},
    {"remove_empty_lines": True},
    {"remove_substrings": ["text", "now"]},
    {"remove_regex": r"Page \d"},
    {"replace_regexes": {r"\d": "#", "Café": "Cafe"}},
    {"remove_repeated_substrings": True},
    {"strip_whitespaces": True},
    {"remove_empty_lines": True, "remove_extra_whitespaces": True, "remove_repeated_substrings": True,
     "unicode_normalization": "NFKD", "remove_regex": "now", "strip_whitespaces": True},
]  # fmt: skip


@pytest.mark.parametrize("options", OPTIONS, ids=lambda options: "+".join(options) or "none")
def test_cleaning_equals_document_cleaner(options: dict) -> None:
    cleaner = DocumentCleaner(**{**OFF, **options}, keep_id=True)
    expected = cleaner.run([HaystackDocument(content=text, id=str(i)) for i, text in enumerate(TEXTS)])["documents"]
    settings = CleanerSettings(**options)
    ours = clean_documents([Document(content=text, id=str(i), meta={"k": i}) for i, text in enumerate(TEXTS)], settings)
    assert [(doc.id, doc.content) for doc in ours] == [(doc.id, doc.content) for doc in expected]
    assert [doc.content.count("\f") for doc in ours] == [text.count("\f") for text in TEXTS]  # pages kept
    assert [doc.meta for doc in ours] == [{"k": i} for i in range(len(TEXTS))]


def test_off_by_default() -> None:
    assert not CleanerSettings().active
    assert clean_documents([Document(content=" a  b\n\n", id="x")], CleanerSettings())[0].content == " a  b\n\n"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="unicode_normalization must be NFC, NFKC, NFD, NFKD or None, not 'NFX'"):
        CleanerSettings(unicode_normalization="NFX").check()
    with pytest.raises(ValueError, match=r"Invalid regular expression '\(': missing \), unterminated subpattern"):
        clean_documents([Document(content="a", id="x")], CleanerSettings(remove_regex="("))
