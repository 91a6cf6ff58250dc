"""Cleaning documents' text with Haystack's `DocumentCleaner` options, every one off by default."""

import re
import unicodedata
from dataclasses import dataclass, replace
from functools import partial, reduce
from itertools import chain

from qa_core.document import Document
from qa_core.settings import Settings, setting, setting_factory

NORMALIZATIONS = ("NFC", "NFKC", "NFD", "NFKD")


@dataclass(frozen=True)
class CleanerSettings(Settings):
    """Cleaning of converted text: Haystack's `DocumentCleaner` options, all off by default.

    The options apply in `DocumentCleaner`'s order; all are off by default (Haystack switches the first three on),
    so that text is kept as converted unless asked. Every option works page by page where Haystack's does, so form
    feeds, and with them page numbers, are kept. `remove_repeated_substrings` is Haystack's heuristic: the longest
    common 3- to 29-word n-gram of the pages' first and last 300 characters, first and last pages ignored.
    """

    unicode_normalization: str | None = setting(
        None, "NFC, NFKC, NFD or NFKD: the text Unicode-normalized; None: as is"
    )
    ascii_only: bool = setting(False, "accents removed (NFKD) and other non-ASCII characters dropped")
    remove_extra_whitespaces: bool = setting(False, "runs of whitespace made one space, each page stripped")
    remove_empty_lines: bool = setting(False, "lines holding only whitespace removed")
    remove_substrings: list[str] = setting_factory(list, "substrings removed everywhere")
    remove_regex: str | None = setting(None, "matches of this regular expression removed, each page stripped")
    replace_regexes: dict[str, str] = setting_factory(dict, "pattern -> replacement, page by page")
    remove_repeated_substrings: bool = setting(False, "headers and footers repeated on every page removed")
    strip_whitespaces: bool = setting(False, "leading and trailing whitespace of the whole text removed")

    def problems(self) -> list[str]:
        problems = []
        if self.unicode_normalization not in (None, *NORMALIZATIONS):
            problems.append(
                f"unicode_normalization must be {', '.join(NORMALIZATIONS)} or None, not {self.unicode_normalization!r}"
            )
        for pattern in [self.remove_regex or "", *self.replace_regexes]:
            try:
                re.compile(pattern)
            except re.error as error:
                problems.append(f"Invalid regular expression {pattern!r}: {error}")
        return problems

    @property
    def active(self) -> bool:
        """Whether any option is on."""
        return self != CleanerSettings()


def clean_documents(documents: list[Document], settings: CleanerSettings) -> list[Document]:
    """
    The documents with their text cleaned (new documents, the ids and meta kept: Haystack's `keep_id=True`).

    Usage example:
    ```python
    docs = clean_documents([Document(content="a  b\\n\\n c", id="x")], CleanerSettings(remove_extra_whitespaces=True))
    assert docs[0].content == "a b c" and docs[0].id == "x"
    ```

    :raises ValueError: If the settings are invalid (see `CleanerSettings.problems`).
    """
    settings.check()
    return [
        doc if doc.content is None else replace(doc, content=clean_text(doc.content, settings)) for doc in documents
    ]


def clean_text(text: str, settings: CleanerSettings) -> str:
    """One text cleaned as `DocumentCleaner.run` cleans a document's content, in its order."""
    if settings.unicode_normalization:
        text = unicodedata.normalize(settings.unicode_normalization, text)
    if settings.ascii_only:
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("utf-8")
    if settings.remove_extra_whitespaces:
        text = "\f".join(re.sub(r"\s\s+", " ", page).strip() for page in text.split("\f"))
    if settings.remove_empty_lines:
        text = "\f".join("\n".join(line for line in page.split("\n") if line.strip()) for page in text.split("\f"))
    for substring in settings.remove_substrings:
        text = text.replace(substring, "")
    if settings.remove_regex:
        text = "\f".join(re.sub(settings.remove_regex, "", page).strip() for page in text.split("\f"))
    if settings.replace_regexes:
        pages = text.split("\f")
        for pattern, replacement in settings.replace_regexes.items():
            pages = [re.sub(pattern, replacement, page) for page in pages]
        text = "\f".join(pages)
    if settings.remove_repeated_substrings:
        text = _remove_header_footer(text, n_chars=300)
    if settings.strip_whitespaces:
        text = text.strip()
    return text


def _remove_header_footer(text: str, n_chars: int) -> str:
    """The longest n-gram common to every page but the first and last, at their start and then at their end."""
    pages = text.split("\f")
    header = _longest_common_ngram([page[:n_chars] for page in pages[1:-1]])
    if header:
        pages = [page.replace(header, "") for page in pages]
    footer = _longest_common_ngram([page[-n_chars:] for page in pages[1:-1]])
    if footer:
        pages = [page.replace(footer, "") for page in pages]
    return "\f".join(pages)


def _ngrams(seq: str, n: int):
    """n-grams of words split by spaces, newlines and tabs kept attached to the word after them."""
    words = seq.replace("\n", " \n").replace("\t", " \t").split(" ")
    return (" ".join(words[i : i + n]).replace(" \n", "\n").replace(" \t", "\t") for i in range(len(words) - n + 1))


def _longest_common_ngram(sequences: list[str], min_ngram: int = 3, max_ngram: int = 30) -> str:
    sequences = [seq for seq in sequences if seq]
    if len(sequences) < 2:  # one page has nothing in common with another
        return ""
    lengths = range(min_ngram, max_ngram)
    ngram_sets = (set(chain.from_iterable(map(partial(_ngrams, seq), lengths))) for seq in sequences)
    longest = max(reduce(set.intersection, ngram_sets), key=len, default="")
    return longest if longest.strip() else ""


__all__ = ["CleanerSettings", "clean_documents", "clean_text"]
