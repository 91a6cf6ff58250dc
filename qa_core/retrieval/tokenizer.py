"""Haystack 3.x's BM25 tokenization: lowercase, Unicode NFC, then a regular expression's matches."""

import re
import unicodedata

# Scripts written without spaces between words (Chinese, Japanese, Korean): one token per character, as in
# haystack.document_stores.in_memory.document_store._CJK_CHAR_CLASS (the test suite checks they are equal).
_CJK_CHAR_CLASS = (
    r"\u1100-\u11ff"  # Hangul Jamo
    r"\ua960-\ua97f"  # Hangul Jamo Extended-A
    r"\ud7b0-\ud7ff"  # Hangul Jamo Extended-B
    r"\u3130-\u318f"  # Hangul Compatibility Jamo
    r"\uac00-\ud7af"  # Hangul Syllables
    r"\u3041-\u3096"  # Hiragana letters
    r"\u30a1-\u30fa\u30fc"  # Katakana letters and the prolonged sound mark (not the middle dot)
    r"\u31f0-\u31ff"  # Katakana Phonetic Extensions
    r"\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    r"\u4e00-\u9fff"  # CJK Unified Ideographs
    r"\uf900-\ufaff"  # CJK Compatibility Ideographs
    r"\uff66-\uff9f"  # Halfwidth Katakana
    r"\uffa0-\uffdc"  # Halfwidth Hangul Jamo
)
# Runs of word characters outside those scripts, or one character of them.
DEFAULT_TOKENIZATION_REGEX = rf"[^\W{_CJK_CHAR_CLASS}]+|[{_CJK_CHAR_CLASS}]"


class Tokenizer:
    """
    Splits text into BM25 terms the way `InMemoryDocumentStore._tokenize_bm25` does.

    Usage example:
    ```python
    tokenizer = Tokenizer()
    assert tokenizer.tokenize("Größe of 北京") == ["größe", "of", "北", "京"]
    ```

    :param regex: The pattern whose matches are the terms (Python `re` syntax), Haystack's
        `bm25_tokenization_regex`.
    :raises ValueError: If `regex` does not compile.
    """

    def __init__(self, regex: str = DEFAULT_TOKENIZATION_REGEX) -> None:
        try:
            self._findall = re.compile(regex).findall
        except re.error as error:
            raise ValueError(f"tokenization_regex {regex!r} is not a valid regular expression: {error}.") from error
        self.regex = regex

    def tokenize(self, text: str) -> list[str]:
        """
        The terms of a text, repeats included, in order.

        :param text: The text.
        :returns: The matches of the regex in the lowercased, NFC-normalised text.
        """
        return self._findall(unicodedata.normalize("NFC", text.lower()))
