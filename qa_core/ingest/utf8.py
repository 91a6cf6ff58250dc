"""
A large text held as UTF-8 outside Python's heap, for converters that build one text from many pieces (a PDF's
pages): it never exists as a `str` unless decoded, and growing it leaves no holes in the heap.
"""

import mmap

# "surrogatepass": any code point a library gives (a lone surrogate from a broken font map) is kept.
ENCODING, ERRORS = "utf-8", "surrogatepass"


class Utf8Buffer:
    """
    Texts appended as UTF-8 into anonymous memory mapped from the operating system, grown by doubling: a page of it
    takes memory only once written, and each outgrown map goes back to the system at once (a `bytearray` grown in
    the heap leaves its old blocks there, which the converter's short-lived objects then fill, and the heap stays
    at twice the text).

    Usage example:
    ```python
    buffer = Utf8Buffer(capacity=2**20)
    buffer.append("page one")
    assert decode(buffer.view()) == "page one"
    ```
    """

    def __init__(self, capacity: int) -> None:
        """`capacity`: the bytes first mapped (address space only: none is memory until written)."""
        self._map = mmap.mmap(-1, max(capacity, mmap.PAGESIZE))
        self.size = 0

    def append(self, text: str) -> None:
        """Appends `text` as UTF-8 (`ERRORS`)."""
        data = text.encode(ENCODING, ERRORS)
        end = self.size + len(data)
        if end > len(self._map):
            grown = mmap.mmap(-1, max(end, 2 * len(self._map)))
            with memoryview(grown) as target, memoryview(self._map) as source:
                target[: self.size] = source[: self.size]
            self._map.close()
            self._map = grown
        self._map[self.size : end] = data
        self.size = end

    def view(self) -> memoryview:
        """The text so far, without a copy (the buffer's memory lives as long as the view)."""
        return memoryview(self._map)[: self.size]


def decode(utf8: memoryview) -> str:
    """A `Utf8Buffer`'s text (its `view`) as a `str`."""
    return str(utf8, ENCODING, ERRORS)


__all__ = ["ENCODING", "ERRORS", "Utf8Buffer", "decode"]
