"""read_questions: each kind of file goes to its reader, and read_squad refuses a Label Studio export plainly."""

import json
from pathlib import Path

import pytest

from qa_core.annotation import label_studio_dataset
from qa_core.question_files import read_questions
from qa_core.squad import GoldAnswer, SquadDataset, SquadExample, SquadFormatError, read_squad, write_squad_json

CONTEXT = "Zoë lives in Kraków."
EXPORT = [  # a Label Studio export (JSON) of one reviewed task
    {
        "id": 7,
        "data": {"question_id": "a", "question": "Where does Zoë live?", "context": CONTEXT},
        "annotations": [{"result": [{"type": "labels", "value": {"start": 13, "end": 19, "text": "Kraków"}}]}],
    }
]


def test_a_label_studio_export_is_read_as_one(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(EXPORT, ensure_ascii=False), encoding="utf-8")
    dataset = read_questions(path)
    assert dataset == label_studio_dataset(path, EXPORT)
    assert [(e.id, e.answers) for e in dataset.examples] == [("a", [GoldAnswer("Kraków", 13)])]
    with pytest.raises(SquadFormatError, match="a JSON list, not SQuAD's layout"):
        read_squad(path)


@pytest.mark.parametrize("name", ["squad.json", "lines.json", "squad.jsonl"])
def test_squad_files_are_read_as_read_squad_reads_them(tmp_path: Path, name: str) -> None:
    examples = [SquadExample("a", None, "Where does Zoë live?", CONTEXT, [GoldAnswer("Kraków", 13)])]
    path = tmp_path / name
    if name == "squad.json":
        write_squad_json(examples, path, version="1.1")
    else:  # JSON Lines, one Hugging Face row a line
        row = {"id": "a", "question": "Where does Zoë live?", "context": CONTEXT}
        row["answers"] = {"text": ["Kraków"], "answer_start": [13]}
        path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_questions(path) == read_squad(path) == SquadDataset(examples, version="1.1", has_gold=True)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="No SQuAD data at"):
        read_questions(tmp_path / "missing.json")
