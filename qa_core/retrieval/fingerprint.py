"""
The fingerprint that identifies a corpus by its documents' positions, ids and contents: a sum of one hash per
document, so that parts of a corpus fingerprinted apart (batches in parallel, shards, documents added later) add
up to the fingerprint of the whole, in any order.
"""

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

_MODULUS = 2**256


def fingerprint_value(ids: Sequence[str], texts: Sequence[str], first_position: int = 0) -> int:
    """
    The sum, modulo 2**256, of each document's SHA-256 over its corpus position, its id and the SHA-256 of its
    text (`fingerprint_hex` shows it; `add_fingerprints` adds parts).

    :param ids: Document ids.
    :param texts: Document texts, in the same order.
    :param first_position: Corpus position of the first document.
    :returns: The fingerprint as an integer.
    """
    return fingerprint_of_hashes(ids, (hashlib.sha256(text.encode("utf-8")).digest() for text in texts), first_position)


def fingerprint_of_hashes(ids: Sequence[str], hashes: Iterable[bytes | np.ndarray], first_position: int = 0) -> int:
    """
    `fingerprint_value` of documents given by their ids and the SHA-256 of their texts (`text_hashes`): what an
    index keeps of its passages, so that a passage that moves to another corpus position is fingerprinted again
    without its text.
    """
    total = 0
    for position, (doc_id, text_hash) in enumerate(zip(ids, hashes, strict=True), start=first_position):
        encoded_id = doc_id.encode("utf-8")
        digest = hashlib.sha256(position.to_bytes(8, "little") + len(encoded_id).to_bytes(8, "little") + encoded_id)
        digest.update(bytes(text_hash))
        total += int.from_bytes(digest.digest(), "little")
    return total % _MODULUS


def text_hashes(texts: Iterable[str]) -> np.ndarray:
    """`(texts, 32)` uint8: the SHA-256 of each text's UTF-8 bytes (what `fingerprint_value` hashes a text to)."""
    digests = b"".join(hashlib.sha256(text.encode("utf-8")).digest() for text in texts)
    return np.frombuffer(digests, np.uint8).reshape(-1, 32)


def fingerprint_hex(value: int) -> str:
    """A fingerprint as the 64 hex digits the index files hold."""
    return format(value % _MODULUS, "064x")


def fingerprint(ids: Sequence[str], texts: Sequence[str], first_position: int = 0) -> str:
    """
    Identifies documents by their positions, ids and contents.

    :param ids: Document ids.
    :param texts: Document texts, in the same order.
    :param first_position: Corpus position of the first document (0 for a whole corpus; a shard's `doc_offset`).
    :returns: 64 hex digits; the shards' fingerprints add up (`add_fingerprints`) to the corpus's.
    """
    return fingerprint_hex(fingerprint_value(ids, texts, first_position))


def add_fingerprints(fingerprints: Sequence[str]) -> str:
    """The fingerprint of documents made of disjoint parts, from the parts' fingerprints (hex)."""
    return fingerprint_hex(sum(int(part, 16) for part in fingerprints))
