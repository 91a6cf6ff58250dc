"""read_squad / write_squad_json: the three layouts, version detection, gold-span validation and the round trip."""

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qa_core.squad import (
    GoldAnswer,
    MisalignedAnswer,
    SquadDataset,
    SquadExample,
    SquadFormatError,
    read_squad,
    write_squad_json,
)

SAMPLE = Path(__file__).parent / "data" / "squad_v2_sample.json"

# Hugging Face's squad / squad_v2 Parquet schema.
HF_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("title", pa.string()),
        ("context", pa.string()),
        ("question", pa.string()),
        ("answers", pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))])),
    ]
)

V11_CONTEXT = "Tea is an aromatic beverage. After water, it is the most widely consumed drink in the world."


def v11_document() -> dict[str, Any]:
    """A small v1.1 file: two articles, one with two paragraphs."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": "Tea",
                "paragraphs": [
                    {
                        "context": V11_CONTEXT,
                        "qas": [
                            {
                                "id": "t1",
                                "question": "What is tea?",
                                "answers": [{"text": "an aromatic beverage", "answer_start": 7}],
                            },
                            {
                                "id": "t2",
                                "question": "What is drunk more?",
                                "answers": [{"text": "water", "answer_start": 35}],
                            },
                        ],
                    },
                    {
                        "context": "Green tea is not oxidised.",
                        "qas": [
                            {
                                "id": "t3",
                                "question": "Is green tea oxidised?",
                                "answers": [{"text": "not oxidised", "answer_start": 13}],
                            }
                        ],
                    },
                ],
            },
            {
                "title": "Loire",
                "paragraphs": [
                    {
                        "context": "The Loire is the longest river in France.",
                        "qas": [
                            {
                                "id": "l1",
                                "question": "What is the longest river in France?",
                                "answers": [
                                    {"text": "The Loire", "answer_start": 0},
                                    {"text": "Loire", "answer_start": 4},
                                ],
                            }
                        ],
                    }
                ],
            },
        ],
    }


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


def official(questions: list[dict[str, Any]], context: str = V11_CONTEXT, version: str | None = "1.1") -> dict:
    """An official-layout document with one article and one paragraph holding `questions`."""
    document: dict[str, Any] = {"data": [{"title": "T", "paragraphs": [{"context": context, "qas": questions}]}]}
    if version is not None:
        document["version"] = version
    return document


def hf_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The official layout flattened into Hugging Face rows, written here independently of qa_core.squad."""
    return [
        {
            "id": qa["id"],
            "title": article["title"],
            "context": paragraph["context"],
            "question": qa["question"],
            "answers": {
                "text": [answer["text"] for answer in qa["answers"]],
                "answer_start": [answer["answer_start"] for answer in qa["answers"]],
            },
        }
        for article in document["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]], schema: pa.Schema = HF_SCHEMA) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def without_plausible(examples: list[SquadExample]) -> list[SquadExample]:
    return [dataclasses.replace(example, plausible_answers=[]) for example in examples]


class TestLayouts:
    def test_official_json_reads_every_field(self):
        dataset = read_squad(SAMPLE)
        assert (dataset.version, dataset.has_gold, len(dataset.examples), dataset.misaligned) == ("2.0", True, 14, [])
        assert [example.id for example in dataset.examples[:3]] == ["Q-loire-1", "Q-loire-2", "Q-loire-3"]
        context = dataset.examples[0].context
        assert dataset.examples[0] == SquadExample(
            id="Q-loire-1",
            title="Loire_Valley",
            question="What is the Loire Valley often called?",
            context=context,
            answers=[GoldAnswer("the Garden of France", 31), GoldAnswer("Garden of France", 35)]
            + [GoldAnswer("the Garden of France", 31)],
            is_impossible=False,
            plausible_answers=[],
        )
        assert dataset.examples[3] == SquadExample(
            id="Q-loire-4",
            title="Loire_Valley",
            question="When did UNESCO remove the valley from its list?",
            context=context,
            answers=[],
            is_impossible=True,
            plausible_answers=[GoldAnswer("2000", 251)],
        )
        assert context[251:255] == "2000"
        assert sum(example.is_impossible for example in dataset.examples) == 4

    @pytest.mark.parametrize("source", ["v2_sample", "v1_1"])
    def test_json_parquet_and_jsonl_give_identical_examples(self, tmp_path: Path, source: str):
        document = json.loads(SAMPLE.read_text(encoding="utf-8")) if source == "v2_sample" else v11_document()
        from_json = read_squad(write_json(tmp_path / "official.json", document))
        rows = hf_rows(document)
        folder = tmp_path / "parts"
        folder.mkdir()
        write_parquet(folder / "part-00000.parquet", rows[:5])
        write_parquet(folder / "part-00001.parquet", rows[5:])
        readings = {
            "parquet": read_squad(write_parquet(tmp_path / "squad.parquet", rows)),
            "parquet folder": read_squad(folder),
            "jsonl": read_squad(write_jsonl(tmp_path / "squad.jsonl", rows)),
            "json lines named .json": read_squad(write_jsonl(tmp_path / "lines.json", rows)),
        }
        expected = without_plausible(from_json.examples)  # the Hugging Face layout has no plausible answers
        assert len(expected) == len(rows)
        for name, dataset in readings.items():
            assert dataset.examples == expected, name
            assert (dataset.version, dataset.has_gold) == (from_json.version, True), name

    @pytest.mark.parametrize(
        ("document", "version"),
        [
            (official([{"id": "a", "question": "Q?", "answers": []}], version="v2.0"), "2.0"),
            (official([{"id": "a", "question": "Q?", "answers": [], "is_impossible": True}], version="1.1"), "2.0"),
            (official([{"id": "a", "question": "Q?", "answers": [{"text": "Tea", "answer_start": 0}]}]), "1.1"),
            (official([{"id": "a", "question": "Q?", "answers": []}], version=None), "2.0"),
            (
                official(
                    [{"id": "a", "question": "Q?", "answers": [{"text": "Tea", "answer_start": 0}]}], version=None
                ),
                "1.1",
            ),
            (official([{"id": "a", "question": "Q?", "answers": []}], version="custom"), "2.0"),
        ],
        ids=[
            "declared-v2.0",
            "is_impossible-wins",
            "declared-1.1",
            "no-version-empty",
            "no-version-answered",
            "unknown",
        ],
    )
    def test_json_version(self, tmp_path: Path, document: dict, version: str):
        dataset = read_squad(write_json(tmp_path / "squad.json", document))
        assert dataset.version == version
        if not dataset.examples[0].answers:
            assert dataset.examples[0].is_impossible

    def test_hf_rows_are_v2_when_any_question_has_no_answer(self, tmp_path: Path):
        rows = hf_rows(v11_document())
        assert read_squad(write_jsonl(tmp_path / "v1.jsonl", rows)).version == "1.1"
        rows[1]["answers"] = {"text": [], "answer_start": []}
        dataset = read_squad(write_parquet(tmp_path / "v2.parquet", rows))
        assert dataset.version == "2.0"
        assert [example.is_impossible for example in dataset.examples] == [False, True, False, False]

    def test_unlabelled_rows_have_no_gold(self, tmp_path: Path):
        rows = [{key: value for key, value in row.items() if key != "answers"} for row in hf_rows(v11_document())]
        schema = pa.schema([f for f in HF_SCHEMA if f.name != "answers"])
        for path in (write_jsonl(tmp_path / "q.jsonl", rows), write_parquet(tmp_path / "q.parquet", rows, schema)):
            dataset = read_squad(path)
            assert (dataset.has_gold, dataset.version) == (False, "1.1")
            assert [(e.answers, e.is_impossible) for e in dataset.examples] == [([], False)] * 4

    def test_unlabelled_official_json_has_no_gold(self, tmp_path: Path):
        document = official([{"id": "a", "question": "What is tea?"}, {"id": "b", "question": "What?"}], version="v2.0")
        dataset = read_squad(write_json(tmp_path / "q.json", document))
        assert (dataset.has_gold, dataset.version, len(dataset.examples)) == (False, "2.0", 2)
        assert not dataset.examples[0].is_impossible


def misaligned_document(n: int) -> dict:
    """`n` questions whose gold answer points one character too far."""
    answers = [{"text": "aromatic", "answer_start": 11}]
    return official([{"id": f"mis-{i:02d}", "question": "What?", "answers": answers} for i in range(n)])


class TestValidation:
    def test_misaligned_gold_raises_listing_every_id(self, tmp_path: Path):
        path = write_json(tmp_path / "bad.json", misaligned_document(25))
        with pytest.raises(SquadFormatError) as error:
            read_squad(path)
        message = str(error.value)
        assert message.startswith(f"{path}: 25 problem(s)")
        assert all(f"'mis-{i:02d}'" in message for i in range(20))
        assert "'mis-20'" not in message and message.endswith("... and 5 more")
        assert len(error.value.problems) == 25
        assert error.value.problems[24] == (
            "question 'mis-24': answer 'aromatic' at answer_start 11 does not match its context"
        )
        assert error.value.path == path
        assert isinstance(error.value, ValueError)

    def test_allow_misaligned_gold_skips_and_reports(self, tmp_path: Path):
        document = official(
            [
                {
                    "id": "partly",
                    "question": "Q?",
                    "answers": [{"text": "Tea", "answer_start": 0}, {"text": "Tea", "answer_start": 1}],
                },
                {"id": "wholly", "question": "Q?", "answers": [{"text": "water", "answer_start": 0}]},
                {
                    "id": "negative",
                    "question": "Q?",
                    "answers": [{"text": "Tea", "answer_start": 0}, {"text": "world", "answer_start": -6}],
                },
                {"id": "fine", "question": "Q?", "answers": [{"text": "water", "answer_start": 35}]},
                {
                    "id": "plausible",
                    "question": "Q?",
                    "answers": [],
                    "is_impossible": True,
                    "plausible_answers": [{"text": "coffee", "answer_start": 3}, {"text": "water", "answer_start": 35}],
                },
            ]
        )
        path = write_json(tmp_path / "mixed.json", document)
        with pytest.raises(SquadFormatError) as error:
            read_squad(path)
        assert len(error.value.problems) == 4
        dataset = read_squad(path, allow_misaligned_gold=True)
        assert dataset.misaligned == [
            MisalignedAnswer("partly", "Tea", 1),
            MisalignedAnswer("wholly", "water", 0),
            MisalignedAnswer("negative", "world", -6),  # context[-6:-1] is "world", yet -6 is no index
            MisalignedAnswer("plausible", "coffee", 3),
        ]
        by_id = {example.id: example for example in dataset.examples}
        assert list(by_id) == ["partly", "negative", "fine", "plausible"]  # "wholly" lost every gold answer
        assert by_id["partly"].answers == [GoldAnswer("Tea", 0)]
        assert by_id["negative"].answers == [GoldAnswer("Tea", 0)]
        assert by_id["plausible"].plausible_answers == [GoldAnswer("water", 35)]
        assert by_id["plausible"].is_impossible

    def test_misaligned_hf_row_is_named_by_id(self, tmp_path: Path):
        rows = hf_rows(v11_document())
        rows[2]["answers"]["answer_start"] = [12]
        with pytest.raises(SquadFormatError, match="question 't3': answer 'not oxidised' at answer_start 12"):
            read_squad(write_parquet(tmp_path / "squad.parquet", rows))

    @pytest.mark.parametrize(
        ("questions", "problem"),
        [
            ([{"id": "q1", "answers": []}], "question 'q1' (data[0].paragraphs[0].qas[0]): missing 'question'"),
            (
                [{"id": "q1", "question": "  ", "answers": []}],
                "question 'q1' (data[0].paragraphs[0].qas[0]): empty question",
            ),
            ([{"question": "Q?", "answers": []}], "data[0].paragraphs[0].qas[0]: missing 'id'"),
            (
                [{"id": 7, "question": "Q?", "answers": []}],
                "data[0].paragraphs[0].qas[0]: 'id' must be a non-empty string, not 7",
            ),
            (
                [
                    {"id": "q1", "question": "Q?", "answers": [{"text": "Tea", "answer_start": 0}]},
                    {"id": "q1", "question": "Again?", "answers": [{"text": "Tea", "answer_start": 0}]},
                ],
                "duplicate id 'q1' at data[0].paragraphs[0].qas[1] (first at data[0].paragraphs[0].qas[0])",
            ),
            (
                [
                    {"id": "q1", "question": "Q?", "answers": [{"text": "Tea", "answer_start": 0}]},
                    {"id": "q2", "question": "Q?"},
                ],
                "1 question(s) have no 'answers' field while others do: question 'q2' (data[0].paragraphs[0].qas[1])",
            ),
            (
                [{"id": "q1", "question": "Q?", "answers": []}],
                "question 'q1' (data[0].paragraphs[0].qas[0]): no gold answers, which SQuAD v1.1 does not allow",
            ),
            (
                [
                    {
                        "id": "q1",
                        "question": "Q?",
                        "answers": [{"text": "Tea", "answer_start": 0}],
                        "is_impossible": True,
                    }
                ],
                "'is_impossible' is true but it has gold answers",
            ),
            (
                [{"id": "q1", "question": "Q?", "answers": [], "is_impossible": False}],
                "'is_impossible' is false but it has no gold answers",
            ),
            (
                [{"id": "q1", "question": "Q?", "answers": [], "is_impossible": "no"}],
                "'is_impossible' must be true or false, not 'no'",
            ),
            (
                [{"id": "q1", "question": "Q?", "answers": [{"text": "Tea", "answer_start": "0"}]}],
                "an integer 'answer_start', not 'Tea' and '0'",
            ),
            (
                [{"id": "q1", "question": "Q?", "answers": {"text": "Tea"}}],
                "question 'q1' (data[0].paragraphs[0].qas[0]): answers must be a list of answers",
            ),
            (["q1"], "data[0].paragraphs[0].qas[0]: not an object: 'q1'"),
        ],
        ids=[
            "missing-question",
            "blank-question",
            "missing-id",
            "int-id",
            "duplicate",
            "mixed-gold",
            "v1.1-empty",
            "impossible-with-answers",
            "possible-without",
            "bad-is_impossible",
            "bad-start",
            "answers-not-list",
            "qa-not-object",
        ],
    )
    def test_problems_name_the_file_and_question(self, tmp_path: Path, questions: list, problem: str):
        path = write_json(tmp_path / "bad.json", official(questions))
        with pytest.raises(SquadFormatError) as error:
            read_squad(path)
        assert str(error.value).startswith(f"{path}: ")
        assert any(problem in found for found in error.value.problems), error.value.problems

    def test_an_article_without_paragraphs_is_reported_as_such(self, tmp_path: Path):
        document = {"version": "v2.0", "data": [{"title": "T", "paragraph": [{"context": "C", "qas": []}]}]}
        with pytest.raises(SquadFormatError) as error:
            read_squad(write_json(tmp_path / "bad.json", document))
        assert error.value.problems == ["data[0] has no 'paragraphs' list"]

    def test_empty_context_is_reported_for_each_question(self, tmp_path: Path):
        questions = [{"id": "q1", "question": "Q?", "answers": []}, {"id": "q2", "question": "Q?", "answers": []}]
        with pytest.raises(SquadFormatError) as error:
            read_squad(write_json(tmp_path / "bad.json", official(questions, context="\n ", version="v2.0")))
        assert error.value.problems == [
            "question 'q1' (data[0].paragraphs[0].qas[0]): empty context",
            "question 'q2' (data[0].paragraphs[0].qas[1]): empty context",
        ]

    def test_hf_row_problems_name_the_row(self, tmp_path: Path):
        rows = hf_rows(v11_document())
        rows[1]["id"] = None
        rows[3]["answers"] = {"text": ["The Loire"], "answer_start": [0, 4]}
        with pytest.raises(SquadFormatError) as error:
            read_squad(write_jsonl(tmp_path / "bad.jsonl", rows))
        assert error.value.problems == [
            "line 2: missing 'id'",
            "question 'l1' (line 4): 'answers' must be {'text': [...], 'answer_start': [...]} of equal lengths, "
            "not {'text': ['The Loire'], 'answer_start': [0, 4]}",
        ]
        write_parquet(tmp_path / "bad.parquet", rows)
        with pytest.raises(SquadFormatError) as error:
            read_squad(tmp_path / "bad.parquet")
        assert error.value.problems[0] == "row 1: missing 'id'"

    def test_parquet_without_a_required_column(self, tmp_path: Path):
        schema = pa.schema([f for f in HF_SCHEMA if f.name != "question"])
        rows = [{key: value for key, value in row.items() if key != "question"} for row in hf_rows(v11_document())]
        with pytest.raises(SquadFormatError, match=r"missing column\(s\) \['question'\]"):
            read_squad(write_parquet(tmp_path / "q.parquet", rows, schema))

    def test_unreadable_inputs(self, tmp_path: Path):
        with pytest.raises(FileNotFoundError, match="No SQuAD data at"):
            read_squad(tmp_path / "missing.json")
        (tmp_path / "empty").mkdir()
        with pytest.raises(SquadFormatError, match="the folder holds no .parquet files"):
            read_squad(tmp_path / "empty")
        with pytest.raises(SquadFormatError, match="unknown file type '.csv'"):
            read_squad(write_json(tmp_path / "squad.csv", {}))
        pretty = tmp_path / "pretty.json"
        pretty.write_text('{\n "version": "1.1"\n}')
        with pytest.raises(SquadFormatError, match="without the official layout's 'data' list"):
            read_squad(pretty)
        broken = tmp_path / "broken.jsonl"
        broken.write_text('{"id": "a"}\n{oops\n')
        with pytest.raises(SquadFormatError, match="line 2 is not JSON"):
            read_squad(broken)


class TestRoundTrip:
    def test_official_sample_is_written_back_as_it_was(self, tmp_path: Path):
        dataset = read_squad(SAMPLE)
        write_squad_json(dataset, tmp_path / "out.json")
        assert json.loads((tmp_path / "out.json").read_text(encoding="utf-8")) == json.loads(
            SAMPLE.read_text(encoding="utf-8")
        )
        again = read_squad(tmp_path / "out.json")
        assert (again.examples, again.version, again.has_gold) == (dataset.examples, "2.0", True)

    def test_hf_rows_round_trip_through_official_json(self, tmp_path: Path):
        dataset = read_squad(write_parquet(tmp_path / "squad.parquet", hf_rows(v11_document())))
        write_squad_json(dataset, tmp_path / "out.json")
        written = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
        assert written == v11_document()
        assert read_squad(tmp_path / "out.json") == dataset

    def test_unlabelled_round_trip(self, tmp_path: Path):
        rows = [{key: value for key, value in row.items() if key != "answers"} for row in hf_rows(v11_document())]
        dataset = read_squad(write_jsonl(tmp_path / "q.jsonl", rows))
        for version in ("1.1", "2.0"):
            write_squad_json(dataset, tmp_path / "out.json", version=version)
            again = read_squad(tmp_path / "out.json")
            assert (again.examples, again.has_gold, again.version) == (dataset.examples, False, version)

    def test_order_is_kept_when_titles_and_contexts_interleave(self, tmp_path: Path):
        examples = [
            SquadExample("e1", "A", "Q1?", "Context one.", [GoldAnswer("one", 8)]),
            SquadExample("e2", "B", "Q2?", "Context two.", [GoldAnswer("two", 8)]),
            SquadExample("e3", "A", "Q3?", "Context one.", [GoldAnswer("Context", 0)]),
            SquadExample("e4", None, "Q4?", "Context one.", [GoldAnswer("one", 8)]),
            SquadExample("e5", None, "Q5?", "Ünïcode 茶 context.", [GoldAnswer("茶", 8)]),
        ]
        write_squad_json(examples, tmp_path / "out.json", version="1.1")
        written = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
        assert [article.get("title") for article in written["data"]] == ["A", "B", "A", None]
        assert [len(article["paragraphs"]) for article in written["data"]] == [1, 1, 1, 2]
        assert read_squad(tmp_path / "out.json") == SquadDataset(examples, version="1.1", has_gold=True)

    def test_write_errors(self, tmp_path: Path):
        examples = read_squad(SAMPLE).examples
        with pytest.raises(ValueError, match="version must be one of"):
            write_squad_json(examples, tmp_path / "out.json")
        with pytest.raises(
            ValueError, match=r"no impossible questions or plausible answers: \['Q-loire-4', 'Q-loire-5'"
        ):
            write_squad_json(examples, tmp_path / "out.json", version="1.1")


def test_reads_hugging_face_rows_in_a_data_list_as_transformers_keeps_its_squad_sample():
    dataset = read_squad(Path("data/squad/transformers_sample.json"))  # the tests run from the project root
    assert (dataset.version, dataset.has_gold, len(dataset.examples)) == ("2.0", True, 14)
    assert [example.id for example in dataset.examples if example.is_impossible] == [
        "5ad39d53604f3c001a3fe8d3", "5ad39d53604f3c001a3fe8d4", "5ad3a266604f3c001a3fea2b",
        "5ad5316b5b96ef001a10ab76", "5ad532575b96ef001a10ab7f", "5ad532575b96ef001a10ab80",
    ]  # fmt: skip
    second = dataset.examples[1]
    assert [(answer.text, answer.answer_start) for answer in second.answers] == [
        ("10th and 11th centuries", 94), ("in the 10th and 11th centuries", 87),
        ("10th and 11th centuries", 94), ("10th and 11th centuries", 94),
    ]  # fmt: skip
