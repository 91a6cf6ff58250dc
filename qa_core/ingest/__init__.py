"""
Corpora as files (engine-free): converters per format with Haystack's converters' semantics, a report row for
every file or row that gives no document, the cleaner, and the sentence splitter behind `split_by="sentence"`.
"""

from qa_core.ingest.cleaner import CleanerSettings, clean_documents
from qa_core.ingest.convert import FORMATS, Converted, Utf8Document, check_unique_ids
from qa_core.ingest.files import convert_file, convert_files, convert_folder
from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.report import BadInput, DuplicateIdError, ReportRow
from qa_core.ingest.rows import RowColumns

__all__ = [
    "FORMATS",
    "BadInput",
    "CleanerSettings",
    "ConversionOptions",
    "Converted",
    "DuplicateIdError",
    "ReportRow",
    "RowColumns",
    "Utf8Document",
    "check_unique_ids",
    "clean_documents",
    "convert_file",
    "convert_files",
    "convert_folder",
]
