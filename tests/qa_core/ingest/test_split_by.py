"""split_documents with every split_by: parity with Haystack's DocumentSplitter on content, meta and ids."""

import json

import pytest
from haystack import Document as HaystackDocument
from haystack.components.preprocessors import DocumentSplitter

from qa_core.document import Document
from qa_core.ingest.sentences import split_sentences
from qa_core.local_models import TEXT_FILE
from qa_core.retrieval import split_documents


def _sources() -> list[dict]:
    with TEXT_FILE.open(encoding="utf-8") as file:
        texts = [json.loads(line)["text"] for line in file][:24]
    # Real paragraphs grouped into pages of passages of lines, and edge cases for each delimiter.
    pages = ["\n\n".join(texts[i : i + 2]).replace(". ", ".\n", 2) for i in range(0, 24, 4)]
    edge_cases = [
        "\f".join(pages),
        "\f\fstarts with form feeds.\n\nThen a passage.\nAnd a line.\f",
        "page one\f\fpage three\fpage four",
        "line one\nline two\n\n\nline five\n",
        'Dr. Smith said "Hi. Bye." Then he left.\n1. First item.\n2. Second one (with brackets). Done? Yes!',
        # Where NLTK's trained model decides: learned abbreviations, initials, collocations, sentence starters.
        "Mr. J. Smith of Washington Corp. met Gen. Jones on Jan. 5 at 9 a.m. in the U.S. The talks went well. "
        "Sales rose 5 p.c. in Oct. However, prices fell. No. 5 was the best. He left at 5 p.m. It was late.",
        "no delimiter at all",
        " ",
        "",
    ]
    return [{"content": text, "meta": {"case": i}} for i, text in enumerate([*texts[:6], *edge_cases])]


SOURCES = _sources()


@pytest.mark.parametrize("split_by", ["word", "sentence", "passage", "page", "line"])
@pytest.mark.parametrize(
    ("split_length", "split_overlap", "split_threshold"), [(1, 0, 0), (2, 0, 0), (3, 1, 0), (4, 2, 3), (50, 10, 0)]
)
def test_passages_equal_haystack(
    split_by: str, split_length: int, split_overlap: int, split_threshold: int, english_punkt_model
) -> None:
    splitter = DocumentSplitter(
        split_by=split_by, split_length=split_length, split_overlap=split_overlap, split_threshold=split_threshold
    )
    expected = splitter.run([HaystackDocument(**source) for source in SOURCES])["documents"]
    ours = split_documents(
        [Document(**source) for source in SOURCES], split_length, split_overlap, split_threshold, split_by=split_by
    )
    assert expected
    assert [(doc.id, doc.content, doc.meta) for doc in ours] == [(doc.id, doc.content, doc.meta) for doc in expected]


def test_sentences_equal_haystacks_sentence_splitter(english_punkt_model) -> None:
    from haystack.components.preprocessors.sentence_tokenizer import SentenceSplitter

    haystack = SentenceSplitter(language="en", keep_white_spaces=True)
    for source in SOURCES:
        expected = [sentence["sentence"] for sentence in haystack.split_sentences(source["content"])]
        assert split_sentences(source["content"]) == expected


def test_the_trained_model_decides_at_abbreviations_and_numbers(english_punkt_model) -> None:
    """Where NLTK's trained English model joins what Punkt without it splits ("9 a.m. in"), and splits what it joins."""
    text = "We met at 9 a.m. in the U.S. The talks went well. Sales rose in Oct. However, prices fell. No. 5 won."
    assert split_sentences(text) == [
        "We met at 9 a.m. in the U.S. ",
        "The talks went well. ",
        "Sales rose in Oct. ",
        "However, prices fell. ",
        "No. ",
        "5 won.",
    ]


def test_pages_keep_their_numbers_empty_pages_included() -> None:
    doc = Document(content="A b.\fC d.\f\fE f.", id="d")
    passages = split_documents([doc], split_length=1, split_by="page")
    assert [(p.content, p.meta["page_number"], p.meta["split_idx_start"]) for p in passages] == [
        ("A b.\f", 1, 0),
        ("C d.\f", 2, 5),
        ("\f", 3, 10),
        ("E f.", 4, 11),
    ]


def test_an_unknown_split_by_is_refused() -> None:
    with pytest.raises(ValueError, match="split_by must be one of word, sentence, passage, page, line, not 'token'"):
        split_documents([Document(content="x")], split_by="token")
