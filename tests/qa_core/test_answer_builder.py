"""AnswerBuilder: answer and reference parsing, run-time overrides, serialisation, and parity with Haystack's own."""

import inspect
import itertools
import logging
from types import SimpleNamespace

import haystack
import pytest
from haystack.components.builders import AnswerBuilder as HaystackAnswerBuilder
from haystack.core.serialization import component_to_dict
from haystack.dataclasses import ChatMessage

from qa_core import AnswerBuilder, Document, GeneratedAnswer
from qa_core.answer_builder import DEFAULT_REFERENCE_PATTERN

LOGGER = "qa_core.answer_builder"


def make_documents(count: int = 3) -> list[Document]:
    """Documents `Doc 1`..`Doc count`; every other one has meta."""
    return [Document(content=f"Doc {i}", meta={"page": i} if i % 2 else {}) for i in range(1, count + 1)]


def summary(documents: list[Document]) -> list[tuple[str, dict]]:
    return [(doc.content, doc.meta) for doc in documents]


class TestAnswerPattern:
    def test_no_pattern_gives_the_whole_reply(self):
        answers = AnswerBuilder().run(query="q", replies=["This is an argument. Answer: Paris."])["answers"]
        assert answers == [
            GeneratedAnswer(
                data="This is an argument. Answer: Paris.",
                query="q",
                documents=[],
                meta={"all_messages": ["This is an argument. Answer: Paris."]},
            )
        ]

    def test_capture_group_is_the_answer(self):
        answers = AnswerBuilder(pattern=r"Answer: (\w+)").run(query="q", replies=["Argument. Answer: Paris."])
        assert answers["answers"][0].data == "Paris"

    def test_non_capturing_groups_do_not_count(self):
        builder = AnswerBuilder(pattern=r"(?:Answer|A): (\w+)")
        assert builder.run(query="q", replies=["A: Rome"])["answers"][0].data == "Rome"

    def test_pattern_without_group_gives_the_whole_match(self):
        answers = AnswerBuilder(pattern=r"[^\n]+$").run(query="q", replies=["an argument.\nthe answer"])["answers"]
        assert answers[0].data == "the answer"

    def test_no_match_gives_empty_string(self):
        answers = AnswerBuilder(pattern=r"Answer: (\w+)").run(query="q", replies=["No answer here."])["answers"]
        assert answers[0].data == ""

    def test_two_groups_rejected_at_construction(self):
        with pytest.raises(ValueError, match=r"Pattern '\(a\)\(b\)' contains 2 capture groups"):
            AnswerBuilder(pattern="(a)(b)")

    def test_two_groups_rejected_at_run(self):
        with pytest.raises(ValueError, match=r"Pattern '\(a\)\(b\)' contains 2 capture groups"):
            AnswerBuilder().run(query="q", replies=["ab"], pattern="(a)(b)")

    def test_two_group_reference_pattern_rejected(self):
        with pytest.raises(ValueError, match="contains 2 capture groups"):
            AnswerBuilder(reference_pattern=r"\[(\d+)\]|\((\d+)\)")

    @pytest.mark.parametrize("where", ["construction", "run"])
    @pytest.mark.parametrize("name", ["pattern", "reference_pattern"])
    def test_invalid_regex_raises_value_error_naming_it(self, name, where):
        with pytest.raises(ValueError, match=r"Pattern 'Answer: \(\.\*' is not a valid regular expression"):
            if where == "construction":
                AnswerBuilder(**{name: "Answer: (.*"})
            else:
                AnswerBuilder().run(
                    query="q", replies=["Answer: x"], documents=make_documents(), **{name: "Answer: (.*"}
                )


class TestReferences:
    def test_only_referenced_documents_by_default(self):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN)
        answer = builder.run(query="q", replies=["Paris [3], see also [1]."], documents=make_documents())["answers"][0]
        assert summary(answer.documents) == [
            ("Doc 1", {"page": 1, "source_index": 1, "referenced": True}),
            ("Doc 3", {"page": 3, "source_index": 3, "referenced": True}),
        ]

    def test_repeated_reference_gives_one_document(self):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN)
        answer = builder.run(query="q", replies=["[2] and [2]"], documents=make_documents())["answers"][0]
        assert summary(answer.documents) == [("Doc 2", {"source_index": 2, "referenced": True})]

    def test_all_documents_when_not_only_referenced(self):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN, return_only_referenced_documents=False)
        answer = builder.run(query="q", replies=["Paris [2]."], documents=make_documents())["answers"][0]
        assert summary(answer.documents) == [
            ("Doc 1", {"page": 1, "source_index": 1, "referenced": False}),
            ("Doc 2", {"source_index": 2, "referenced": True}),
            ("Doc 3", {"page": 3, "source_index": 3, "referenced": False}),
        ]

    @pytest.mark.parametrize("only_referenced", [True, False])
    def test_without_reference_pattern_all_documents_without_referenced(self, only_referenced):
        builder = AnswerBuilder(return_only_referenced_documents=only_referenced)
        answer = builder.run(query="q", replies=["Paris [2]."], documents=make_documents())["answers"][0]
        assert summary(answer.documents) == [
            ("Doc 1", {"page": 1, "source_index": 1}),
            ("Doc 2", {"source_index": 2}),
            ("Doc 3", {"page": 3, "source_index": 3}),
        ]

    def test_document_copies_keep_their_ids(self):
        documents = make_documents()
        answer = AnswerBuilder().run(query="q", replies=["x"], documents=documents)["answers"][0]
        assert [doc.id for doc in answer.documents] == [doc.id for doc in documents]

    def test_input_documents_are_not_mutated(self):
        documents = make_documents()
        metas = [doc.meta for doc in documents]
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN, return_only_referenced_documents=False)
        answer = builder.run(query="q", replies=["[1]"], documents=documents)["answers"][0]
        assert summary(documents) == [("Doc 1", {"page": 1}), ("Doc 2", {}), ("Doc 3", {"page": 3})]
        assert all(doc.meta is meta for doc, meta in zip(documents, metas, strict=True))
        assert all(copy is not doc for copy, doc in zip(answer.documents, documents, strict=True))

    @pytest.mark.parametrize("documents", [None, []])
    def test_no_documents_gives_no_documents(self, documents):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN)
        assert builder.run(query="q", replies=["[1]"], documents=documents)["answers"][0].documents == []

    def test_out_of_range_references_skipped_with_warning(self, caplog):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            answer = builder.run(query="q", replies=["[0] [2] [7]"], documents=make_documents())["answers"][0]
        assert summary(answer.documents) == [("Doc 2", {"source_index": 2, "referenced": True})]
        assert [record.getMessage() for record in caplog.records] == [
            "Document reference 0 in the reply is out of range (1 to 3).",
            "Document reference 7 in the reply is out of range (1 to 3).",
        ]

    def test_out_of_range_references_warned_when_returning_all(self, caplog):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN, return_only_referenced_documents=False)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            answer = builder.run(query="q", replies=["[0] [2]"], documents=make_documents())["answers"][0]
        assert [doc.meta["referenced"] for doc in answer.documents] == [False, True, False]
        assert [record.getMessage() for record in caplog.records] == [
            "Document reference 0 in the reply is out of range (1 to 3)."
        ]


class TestReferenceRanges:
    def run_references(self, reply: str, count: int = 6, **init: object) -> list[int]:
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN, **init)
        answer = builder.run(query="q", replies=[reply], documents=make_documents(count))["answers"][0]
        return [doc.meta["source_index"] for doc in answer.documents]

    def test_ranges_and_lists_expanded(self):
        assert self.run_references("See [1-3,5].", expand_reference_ranges=True) == [1, 2, 3, 5]

    def test_ranges_not_read_without_expansion(self):
        assert self.run_references("See [1-3,5] and [6].") == [6]

    def test_custom_pattern_used_as_given_when_expanding(self):
        builder = AnswerBuilder(reference_pattern=r"<([\d,-]+)>", expand_reference_ranges=True)
        answer = builder.run(query="q", replies=["<2-3> [1]"], documents=make_documents())["answers"][0]
        assert [doc.meta["source_index"] for doc in answer.documents] == [2, 3]

    def test_range_end_clamped_to_document_count(self, caplog):
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert self.run_references("[2-999999999]", count=3, expand_reference_ranges=True) == [2, 3]
        assert caplog.records == []

    def test_reversed_range_gives_nothing(self):
        assert self.run_references("[3-1] [5]", expand_reference_ranges=True) == [5]

    def test_range_from_zero_warns_about_zero(self, caplog):
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert self.run_references("[0-2]", expand_reference_ranges=True) == [1, 2]
        assert [record.getMessage() for record in caplog.records] == [
            "Document reference 0 in the reply is out of range (1 to 6)."
        ]

    def test_malformed_range_skipped_with_warning(self, caplog):
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert self.run_references("[1-2-3] [4]", expand_reference_ranges=True) == [4]
        assert [record.getMessage() for record in caplog.records] == [
            "Malformed document reference range '1-2-3' in the reply is skipped."
        ]


class TestRepliesAndMeta:
    def test_answer_meta_is_reply_meta_plus_all_messages(self):
        replies = ["Answer one", "Answer two"]
        answers = AnswerBuilder().run(query="q", replies=replies, meta=[{"model": "a"}, {"model": "b"}])["answers"]
        assert [(answer.data, answer.query, answer.meta) for answer in answers] == [
            ("Answer one", "q", {"model": "a", "all_messages": replies}),
            ("Answer two", "q", {"model": "b", "all_messages": replies}),
        ]

    def test_given_meta_is_not_mutated(self):
        meta = [{"model": "a"}]
        AnswerBuilder().run(query="q", replies=["x"], meta=meta)
        assert meta == [{"model": "a"}]

    @pytest.mark.parametrize("meta", [[], [{}], [{}, {}, {}]])
    def test_meta_of_another_length_raises(self, meta):
        with pytest.raises(ValueError, match=rf"Number of replies \(2\) and of metadata \({len(meta)}\) must match"):
            AnswerBuilder().run(query="q", replies=["a", "b"], meta=meta)

    def test_last_message_only_uses_last_reply_and_meta(self):
        builder = AnswerBuilder(last_message_only=True)
        answers = builder.run(query="q", replies=["first", "last"], meta=[{"n": 1}, {"n": 2}])["answers"]
        assert [(answer.data, answer.meta) for answer in answers] == [
            ("last", {"n": 2, "all_messages": ["first", "last"]})
        ]

    def test_last_message_only_without_replies(self):
        assert AnswerBuilder(last_message_only=True).run(query="q", replies=[]) == {"answers": []}

    def test_chat_messages_read_by_text_and_meta(self):
        replies = [ChatMessage.from_assistant("Answer: Paris", meta={"model": "m", "usage": 1})]
        answer = AnswerBuilder(pattern=r"Answer: (\w+)").run(query="q", replies=replies, meta=[{"usage": 2}])
        assert answer["answers"][0].data == "Paris"
        assert answer["answers"][0].meta == {"model": "m", "usage": 2, "all_messages": replies}

    def test_duck_typed_replies_with_no_text_or_meta(self):
        replies = [SimpleNamespace(text=None), SimpleNamespace(text="Rome", meta=None)]
        answers = AnswerBuilder().run(query="q", replies=replies)["answers"]
        assert [(answer.data, answer.meta) for answer in answers] == [
            ("", {"all_messages": replies}),
            ("Rome", {"all_messages": replies}),
        ]


class TestRunTimeOverrides:
    def test_overrides_replace_constructor_values(self):
        builder = AnswerBuilder(pattern=r"Answer: (\w+)", reference_pattern=r"<(\d+)>")
        answer = builder.run(
            query="q",
            replies=["Answer: Paris; Final: Rome [1-2] <3>"],
            documents=make_documents(),
            pattern=r"Final: (\w+)",
            reference_pattern=DEFAULT_REFERENCE_PATTERN,
            expand_reference_ranges=True,
        )["answers"][0]
        assert answer.data == "Rome"
        assert [doc.meta["source_index"] for doc in answer.documents] == [1, 2]

    def test_none_keeps_constructor_values(self):
        builder = AnswerBuilder(pattern=r"Answer: (\w+)", reference_pattern=r"<([\d-]+)>", expand_reference_ranges=True)
        answer = builder.run(query="q", replies=["Answer: Paris [1] <2-3>"], documents=make_documents())["answers"][0]
        assert answer.data == "Paris"
        assert [doc.meta["source_index"] for doc in answer.documents] == [2, 3]

    def test_explicit_empty_pattern_is_honoured(self):
        # Haystack's `pattern or self.pattern` would fall back to the constructor's pattern and answer "Paris".
        builder = AnswerBuilder(pattern=r"Answer: (\w+)")
        assert builder.run(query="q", replies=["Answer: Paris"], pattern="")["answers"][0].data == ""

    def test_explicit_empty_reference_pattern_turns_parsing_off(self):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN)
        answer = builder.run(query="q", replies=["[2]"], documents=make_documents(), reference_pattern="")["answers"][0]
        assert [doc.meta for doc in answer.documents] == [
            {"page": 1, "source_index": 1},
            {"source_index": 2},
            {"page": 3, "source_index": 3},
        ]

    def test_explicit_false_expansion_is_honoured(self):
        builder = AnswerBuilder(reference_pattern=DEFAULT_REFERENCE_PATTERN, expand_reference_ranges=True)
        replies = ["[1-2] [3]"]
        answer = builder.run(query="q", replies=replies, documents=make_documents(), expand_reference_ranges=False)
        assert [doc.meta["source_index"] for doc in answer["answers"][0].documents] == [3]


class TestSerialization:
    def test_to_dict(self):
        builder = AnswerBuilder(
            pattern=r"Answer: (.*)",
            reference_pattern=DEFAULT_REFERENCE_PATTERN,
            last_message_only=True,
            return_only_referenced_documents=False,
            expand_reference_ranges=True,
        )
        assert builder.to_dict() == {
            "type": "qa_core.answer_builder.AnswerBuilder",
            "init_parameters": {
                "pattern": r"Answer: (.*)",
                "reference_pattern": r"\[(\d+)\]",
                "last_message_only": True,
                "return_only_referenced_documents": False,
                "expand_reference_ranges": True,
            },
        }

    def test_to_dict_has_every_constructor_parameter(self):
        parameters = list(inspect.signature(AnswerBuilder).parameters)
        assert list(AnswerBuilder().to_dict()["init_parameters"]) == parameters

    def test_round_trip(self):
        builder = AnswerBuilder(pattern=r"A: (\w+)", last_message_only=True, expand_reference_ranges=True)
        assert AnswerBuilder.from_dict(builder.to_dict()).to_dict() == builder.to_dict()

    def test_from_dict_reads_haystack_form(self):
        haystack_builder = HaystackAnswerBuilder(
            pattern=r"A: (\w+)", reference_pattern=r"<(\d+)>", last_message_only=True
        )
        builder = AnswerBuilder.from_dict(component_to_dict(haystack_builder, "answer_builder"))
        assert builder.to_dict()["init_parameters"] == {
            "pattern": r"A: (\w+)",
            "reference_pattern": r"<(\d+)>",
            "last_message_only": True,
            "return_only_referenced_documents": True,
            "expand_reference_ranges": False,
        }

    def test_to_dict_matches_haystack_init_parameters(self):
        init = {"pattern": "x", "reference_pattern": "<(\\d+)>", "return_only_referenced_documents": False}
        expected = component_to_dict(HaystackAnswerBuilder(**init), "answer_builder")["init_parameters"]
        assert AnswerBuilder(**init).to_dict()["init_parameters"] == expected


# The parity grid: every combination is run through both builders.
PARITY_REPLIES = {
    "answers_and_refs": ["Answer: Paris [2].", "Answer: Berlin [1][3], more text"],
    "out_of_range": ["Answer: Rome [0] [6] [9] [5]"],
    "ranges": ["Answer: Many [1-3,5] and [2-99]", "Nothing here", "Answer: Reversed [4-2]"],
    "no_refs": ["no references and no answer at all"],
}
PARITY_PATTERNS = [None, r"Answer: (\w+)", r"[A-Z]\w+"]
# A custom pattern that captures ranges: without expansion `int("1-3")` fails, in both builders alike.
RANGE_REFERENCE_PATTERN = r"\[(\d+(?:-\d+)?)\]"
PARITY_REFERENCE_PATTERNS = [None, DEFAULT_REFERENCE_PATTERN, RANGE_REFERENCE_PATTERN]


def parity_documents(document_class: type) -> list:
    contents = ["Berlin is in Germany.", "Paris is in France.", "Rome is in Italy.", "Madrid is in Spain.", "Oslo."]
    return [
        document_class(content=content, meta={"rank": i, "lang": "en"} if i % 2 else {})
        for i, content in enumerate(contents, start=1)
    ]


def answer_fields(answer) -> tuple:
    documents = [(doc.id, doc.content, doc.meta) for doc in answer.documents]
    return answer.data, answer.query, answer.meta, documents


def outcomes(init: dict, run: dict) -> tuple[list | type, list | type]:
    """Our and Haystack's answers (as comparable fields) for the same call, or the type of the error raised."""
    results = []
    for builder_class, document_class in [(AnswerBuilder, Document), (HaystackAnswerBuilder, haystack.Document)]:
        try:
            answers = builder_class(**init).run(query="q", documents=parity_documents(document_class), **run)
            results.append([answer_fields(answer) for answer in answers["answers"]])
        except Exception as error:  # the same error type is expected from both
            results.append(type(error))
    return results[0], results[1]


class TestHaystackParity:
    @pytest.mark.parametrize(
        ("replies_name", "pattern", "reference_pattern", "expand", "last_only", "only_referenced", "with_meta"),
        list(
            itertools.product(
                PARITY_REPLIES,
                PARITY_PATTERNS,
                PARITY_REFERENCE_PATTERNS,
                [False, True],
                [False, True],
                [True, False],
                [False, True],
            )
        ),
    )
    def test_same_answers_as_haystack(
        self, replies_name, pattern, reference_pattern, expand, last_only, only_referenced, with_meta
    ):
        replies = PARITY_REPLIES[replies_name]
        meta = [{"reply": i, "model": "m"} for i in range(len(replies))] if with_meta else None
        init = {
            "pattern": pattern,
            "reference_pattern": reference_pattern,
            "last_message_only": last_only,
            "return_only_referenced_documents": only_referenced,
            "expand_reference_ranges": expand,
        }
        ours, theirs = outcomes(init, {"replies": replies, "meta": meta})
        assert ours == theirs
        unread_range = replies_name == "ranges" and reference_pattern == RANGE_REFERENCE_PATTERN and not expand
        assert ours is ValueError if unread_range else isinstance(ours, list)

    @pytest.mark.parametrize("replies_name", list(PARITY_REPLIES))
    @pytest.mark.parametrize("expand", [None, False, True])
    def test_same_answers_with_run_time_overrides(self, replies_name, expand):
        replies = PARITY_REPLIES[replies_name]
        init = {"pattern": r"(\w+)", "reference_pattern": r"<(\d+)>", "expand_reference_ranges": not expand}
        run = {
            "pattern": r"Answer: (\w+)",
            "reference_pattern": DEFAULT_REFERENCE_PATTERN,
            "expand_reference_ranges": expand,
        }
        ours, theirs = outcomes(init, {"replies": replies, **run})
        assert isinstance(ours, list)
        assert ours == theirs

    def test_same_answers_for_chat_messages(self):
        replies = [
            ChatMessage.from_assistant("Answer: Paris [2]", meta={"model": "m", "index": 0}),
            ChatMessage.from_assistant("Answer: Rome [3]", meta={"model": "m", "index": 1}),
        ]
        meta = [{"index": 10}, {"extra": True}]
        init = {"pattern": r"Answer: (\w+)", "reference_pattern": DEFAULT_REFERENCE_PATTERN}
        ours, theirs = outcomes(init, {"replies": replies, "meta": meta})
        assert isinstance(ours, list)
        assert ours == theirs
