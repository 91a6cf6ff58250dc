"""split_documents: parity with Haystack's DocumentSplitter(split_by="word") on content, meta and ids."""

import json
from pathlib import Path

import pytest
from haystack import Document as HaystackDocument
from haystack.components.preprocessors import DocumentSplitter

from qa_core.document import Document
from qa_core.local_models import TEXT_FILE
from qa_core.retrieval import split_documents

REPO = Path(__file__).resolve().parents[2]


def _sources() -> list[dict]:
    with TEXT_FILE.open(encoding="utf-8") as file:
        records = [json.loads(line) for line in file][:40]
    edge_cases = [
        "one two three four five six seven",
        "trailing spaces   ",
        "  leading and  double  spaces ",
        "page one\fpage two \f\fpage four words here",
        "\f\fstarts with form feeds and more words",
        "single",
        " ",
        "",
        "抽取式问答组件 中文 文本 没有 很多 空格",
    ]
    return [{"content": record["text"], "meta": {"title": record["title"]}} for record in records] + [
        {"content": text, "meta": {"case": i}} for i, text in enumerate(edge_cases)
    ]


SOURCES = _sources()


@pytest.mark.parametrize(
    ("split_length", "split_overlap", "split_threshold"),
    [(200, 0, 0), (3, 0, 0), (3, 1, 0), (5, 2, 0), (40, 10, 0), (10, 3, 4), (1, 0, 0), (2, 1, 2)],
)
def test_passages_equal_haystack(split_length: int, split_overlap: int, split_threshold: int) -> None:
    splitter = DocumentSplitter(
        split_by="word", split_length=split_length, split_overlap=split_overlap, split_threshold=split_threshold
    )
    expected = splitter.run([HaystackDocument(**source) for source in SOURCES])["documents"]
    ours = split_documents(
        [Document(**source) for source in SOURCES], split_length, split_overlap, split_threshold=split_threshold
    )
    assert [(doc.id, doc.content, doc.meta) for doc in ours] == [(doc.id, doc.content, doc.meta) for doc in expected]


def test_passages_locate_themselves_in_their_source() -> None:
    sources = [Document(**source) for source in SOURCES]
    by_id = {doc.id: doc for doc in sources}
    passages = split_documents(sources, split_length=7, split_overlap=2)
    for passage in passages:
        start = passage.meta["split_idx_start"]
        assert by_id[passage.meta["source_id"]].content[start : start + len(passage.content)] == passage.content


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split_length": 0}, "split_length"),
        ({"split_length": 3, "split_overlap": 3}, "split_overlap"),
        ({"split_length": 3, "split_overlap": -1}, "split_overlap"),
    ],
)
def test_bad_split_options_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_documents([Document(content="a b c")], **kwargs)


def test_document_without_content_raises() -> None:
    with pytest.raises(ValueError, match="no content"):
        split_documents([Document(content=None)], split_length=3)
