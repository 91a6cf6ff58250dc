"""Engine-free extractive question answering with Haystack's semantics: reader, answers, AnswerBuilder."""

from qa_core.answer_builder import AnswerBuilder
from qa_core.answers import ExtractedAnswer, GeneratedAnswer
from qa_core.document import Document
from qa_core.reader import ExtractiveReader
from qa_core.secret import Secret

__all__ = ["AnswerBuilder", "Document", "ExtractedAnswer", "ExtractiveReader", "GeneratedAnswer", "Secret"]
