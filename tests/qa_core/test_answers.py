"""Document, ExtractedAnswer, GeneratedAnswer and Secret: ids, serialisation, and compatibility with Haystack's."""

import datetime

import haystack
import pytest
from haystack.dataclasses import ExtractedAnswer as HaystackExtractedAnswer
from haystack.dataclasses import GeneratedAnswer as HaystackGeneratedAnswer
from haystack.utils import Secret as HaystackSecret

from qa_core import Document, ExtractedAnswer, GeneratedAnswer, Secret

Span = ExtractedAnswer.Span

# Contents and metas whose ids must agree with Haystack's.
ID_CASES = [
    ("Paris is the capital of France.", {}),
    ("Paris is the capital of France.", {"page_number": 1}),
    ("Paris is the capital of France.", {"b": [1, 2], "a": {"nested": True}}),
    ("Ünïcödé text — with 漢字", {"lang": "xx"}),
    ("", {}),
    (None, {}),
    (None, {"page_number": 3}),
    ("dated", {"when": datetime.date(2024, 1, 31)}),
]


class TestDocumentId:
    def test_id_is_deterministic(self):
        first = Document(content="Paris", meta={"a": 1, "b": 2})
        assert first.id == Document(content="Paris", meta={"b": 2, "a": 1}).id
        # sha256 of 'ParisNoneNoneNone{"a": 1, "b": 2}None', the value haystack.Document gives too.
        assert first.id == "89c8dffc5dd08614b83361406b284b69f2309b6e4114b0fd2870de522025ecfb"

    def test_id_depends_on_content_and_meta(self):
        ids = {
            Document(content="Paris").id,
            Document(content="Rome").id,
            Document(content="Paris", meta={"a": 1}).id,
            Document(content="Paris", meta={"a": 2}).id,
        }
        assert len(ids) == 4

    @pytest.mark.parametrize(("content", "meta"), ID_CASES)
    def test_id_equals_haystack_id(self, content, meta):
        assert Document(content=content, meta=meta).id == haystack.Document(content=content, meta=meta).id

    def test_explicit_id_is_kept(self):
        assert Document(content="Paris", id="doc-7").id == "doc-7"

    def test_equal_documents_compare_equal(self):
        assert Document(content="Paris", meta={"a": 1}) == Document(content="Paris", meta={"a": 1})
        assert Document(content="Paris", meta={"a": 1}) != Document(content="Paris", meta={"a": 2})

    @pytest.mark.parametrize(("content", "type_name"), [(5, "int"), (b"bytes", "bytes"), (["a"], "list")])
    def test_content_must_be_a_string_or_none(self, content, type_name):
        with pytest.raises(ValueError, match=f"Document content must be a string or None, not {type_name}."):
            Document(content=content)


class TestDocumentSerialization:
    def test_to_dict(self):
        doc = Document(content="Paris", id="d1", meta={"page_number": 2})
        assert doc.to_dict() == {"id": "d1", "content": "Paris", "meta": {"page_number": 2}}

    def test_to_dict_copies_meta(self):
        doc = Document(content="Paris", meta={"page_number": 2})
        doc.to_dict()["meta"]["page_number"] = 3
        assert doc.meta == {"page_number": 2}

    @pytest.mark.parametrize(("content", "meta"), ID_CASES[:5])
    def test_round_trip(self, content, meta):
        doc = Document(content=content, meta=meta)
        assert Document.from_dict(doc.to_dict()) == doc

    @pytest.mark.parametrize("flatten", [True, False])
    def test_from_dict_reads_haystack_to_dict(self, flatten):
        theirs = haystack.Document(content="Paris", meta={"page_number": 2, "source": "wiki"})
        ours = Document.from_dict(theirs.to_dict(flatten=flatten))
        assert (ours.id, ours.content, ours.meta) == (theirs.id, "Paris", {"page_number": 2, "source": "wiki"})


class TestExtractedAnswer:
    def make_answer(self) -> ExtractedAnswer:
        return ExtractedAnswer(
            query="Capital of France?",
            score=0.875,
            data="Paris",
            document=Document(content="Paris is the capital of France.", id="d1", meta={"page_number": 1}),
            context="Paris is the capital",
            document_offset=Span(0, 5),
            context_offset=Span(0, 5),
            meta={"answer_page_number": 1},
        )

    def test_to_dict(self):
        assert self.make_answer().to_dict() == {
            "data": "Paris",
            "query": "Capital of France?",
            "document": {"id": "d1", "content": "Paris is the capital of France.", "meta": {"page_number": 1}},
            "context": "Paris is the capital",
            "score": 0.875,
            "document_offset": {"start": 0, "end": 5},
            "context_offset": {"start": 0, "end": 5},
            "meta": {"answer_page_number": 1},
        }

    def test_round_trip_with_document_and_offsets(self):
        answer = self.make_answer()
        assert ExtractedAnswer.from_dict(answer.to_dict()) == answer

    def test_round_trip_without_document(self):
        no_answer = ExtractedAnswer(query="Capital of France?", score=0.125)
        data = no_answer.to_dict()
        assert data == {
            "data": None,
            "query": "Capital of France?",
            "document": None,
            "context": None,
            "score": 0.125,
            "document_offset": None,
            "context_offset": None,
            "meta": {},
        }
        assert ExtractedAnswer.from_dict(data) == no_answer

    def test_from_dict_reads_legacy_init_parameters_form(self):
        answer = self.make_answer()
        legacy = {"type": "haystack.dataclasses.answer.ExtractedAnswer", "init_parameters": answer.to_dict()}
        assert ExtractedAnswer.from_dict(legacy) == answer

    def test_from_dict_reads_haystack_to_dict(self):
        document = haystack.Document(content="Paris is the capital of France.", meta={"page_number": 1})
        theirs = HaystackExtractedAnswer(
            query="Capital of France?",
            score=0.875,
            data="Paris",
            document=document,
            context="Paris is the capital",
            document_offset=HaystackExtractedAnswer.Span(0, 5),
            context_offset=HaystackExtractedAnswer.Span(0, 5),
            meta={"answer_page_number": 1},
        )
        expected = self.make_answer()
        expected.document = Document(content="Paris is the capital of France.", meta={"page_number": 1})
        assert ExtractedAnswer.from_dict(theirs.to_dict()) == expected
        assert expected.document.id == document.id

    def test_haystack_reads_our_to_dict(self):
        theirs = HaystackExtractedAnswer.from_dict(self.make_answer().to_dict())
        assert (theirs.data, theirs.score, theirs.document.id, theirs.document.meta, theirs.document_offset.end) == (
            "Paris",
            0.875,
            "d1",
            {"page_number": 1},
            5,
        )


class TestGeneratedAnswer:
    def make_answer(self) -> GeneratedAnswer:
        return GeneratedAnswer(
            data="Paris",
            query="Capital of France?",
            documents=[Document(content="Paris is in France.", id="d2", meta={"source_index": 2, "referenced": True})],
            meta={"model": "m", "all_messages": ["Paris [2]"]},
        )

    def test_to_dict(self):
        assert self.make_answer().to_dict() == {
            "data": "Paris",
            "query": "Capital of France?",
            "documents": [
                {"id": "d2", "content": "Paris is in France.", "meta": {"source_index": 2, "referenced": True}}
            ],
            "meta": {"model": "m", "all_messages": ["Paris [2]"]},
        }

    def test_round_trip(self):
        answer = self.make_answer()
        assert GeneratedAnswer.from_dict(answer.to_dict()) == answer

    def test_round_trip_without_documents(self):
        answer = GeneratedAnswer(data="", query="q", documents=[])
        assert GeneratedAnswer.from_dict(answer.to_dict()) == answer

    def test_from_dict_reads_legacy_init_parameters_form(self):
        answer = self.make_answer()
        legacy = {"type": "haystack.dataclasses.answer.GeneratedAnswer", "init_parameters": answer.to_dict()}
        assert GeneratedAnswer.from_dict(legacy) == answer

    def test_from_dict_does_not_share_meta(self):
        data = self.make_answer().to_dict()
        GeneratedAnswer.from_dict(data).meta["model"] = "changed"
        assert data["meta"]["model"] == "m"

    def test_from_dict_reads_haystack_to_dict(self):
        document = haystack.Document(content="Paris is in France.", meta={"source_index": 2, "referenced": True})
        theirs = HaystackGeneratedAnswer(data="Paris", query="q", documents=[document], meta={"all_messages": ["x"]})
        ours = GeneratedAnswer.from_dict(theirs.to_dict())
        assert (ours.data, ours.query, ours.meta) == ("Paris", "q", {"all_messages": ["x"]})
        assert [(doc.id, doc.content, doc.meta) for doc in ours.documents] == [
            (document.id, "Paris is in France.", {"source_index": 2, "referenced": True})
        ]


class TestSecret:
    def test_to_dict_holds_names_never_the_value(self, monkeypatch):
        monkeypatch.setenv("QA_TEST_TOKEN", "s3cr3t-value")
        secret = Secret.from_env_var(["QA_TEST_TOKEN", "QA_TEST_FALLBACK"], strict=False)
        assert secret.resolve_value() == "s3cr3t-value"
        assert secret.to_dict() == {
            "type": "env_var",
            "env_vars": ["QA_TEST_TOKEN", "QA_TEST_FALLBACK"],
            "strict": False,
        }
        assert "s3cr3t-value" not in repr(secret)

    def test_single_name_is_accepted(self, monkeypatch):
        monkeypatch.setenv("QA_TEST_TOKEN", "value")
        secret = Secret.from_env_var("QA_TEST_TOKEN")
        assert (secret.env_vars, secret.resolve_value()) == (("QA_TEST_TOKEN",), "value")

    def test_first_set_variable_wins(self, monkeypatch):
        monkeypatch.setenv("QA_TEST_FIRST", "first")
        monkeypatch.setenv("QA_TEST_SECOND", "second")
        assert Secret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"]).resolve_value() == "first"

    def test_later_variable_used_when_earlier_unset(self, monkeypatch):
        monkeypatch.delenv("QA_TEST_FIRST", raising=False)
        monkeypatch.setenv("QA_TEST_SECOND", "second")
        assert Secret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"]).resolve_value() == "second"

    def test_empty_variable_counts_as_unset(self, monkeypatch):
        # Haystack's EnvVarSecret would return "" here; an empty token is treated as missing instead.
        monkeypatch.setenv("QA_TEST_FIRST", "")
        monkeypatch.setenv("QA_TEST_SECOND", "second")
        assert Secret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"]).resolve_value() == "second"

    def test_strict_secret_raises_when_nothing_is_set(self, monkeypatch):
        monkeypatch.delenv("QA_TEST_FIRST", raising=False)
        monkeypatch.delenv("QA_TEST_SECOND", raising=False)
        with pytest.raises(ValueError, match="None of the environment variables QA_TEST_FIRST, QA_TEST_SECOND is set"):
            Secret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"]).resolve_value()

    def test_non_strict_secret_resolves_to_none(self, monkeypatch):
        monkeypatch.delenv("QA_TEST_FIRST", raising=False)
        assert Secret.from_env_var("QA_TEST_FIRST", strict=False).resolve_value() is None

    def test_round_trip(self):
        secret = Secret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"], strict=False)
        assert Secret.from_dict(secret.to_dict()) == secret

    def test_from_dict_reads_haystack_to_dict(self):
        data = HaystackSecret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"], strict=False).to_dict()
        assert Secret.from_dict(data) == Secret.from_env_var(["QA_TEST_FIRST", "QA_TEST_SECOND"], strict=False)

    def test_from_dict_refuses_other_types(self):
        with pytest.raises(
            ValueError, match="Unknown secret type 'token': only 'env_var' secrets can be deserialised."
        ):
            Secret.from_dict({"type": "token", "token": "x"})

    def test_token_secret_resolves_but_refuses_to_serialise(self):
        secret = Secret.from_token("s3cr3t-value")
        assert secret.resolve_value() == "s3cr3t-value"
        assert repr(secret) == "Secret(***)"
        with pytest.raises(ValueError, match="A token given by value cannot be serialised"):
            secret.to_dict()
