"""
Sentences for `split_by="sentence"`, offline: NLTK's Punkt algorithm, with Haystack's `SentenceSplitter` rules.

Haystack's `SentenceSplitter` loads NLTK's trained English `punkt_tab` model, which it downloads at run time when it
is missing. This one never downloads: it runs Punkt with parameters holding only Haystack's curated English
abbreviations (`data/abbreviations_en.txt`, copied from haystack-ai, Apache-2.0), and applies Haystack's whitespace
keeping and its split rules (quotes, numbered lists, brackets) as they are. It gives Haystack's sentences exactly
where Haystack runs with an empty `punkt_tab` model (the parity test); against Haystack's trained model it can
differ where that model's learned parameters decide: an abbreviation it learned that the curated list lacks (a
split here after the period), and its collocations and frequent sentence starters (which make Punkt split or join
at an initial, an ordinal or a number followed by a period).
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
    from nltk.tokenize.punkt import PunktLanguageVars, PunktParameters, PunktSentenceTokenizer

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

    params = PunktParameters()
    params.abbrev_types.update(_ABBREVIATIONS.read_text(encoding="utf-8").split("\n"))
    return PunktSentenceTokenizer(params, lang_vars=KeepWhiteSpaces())


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


__all__ = ["split_sentences"]
