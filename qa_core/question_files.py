"""
Which reader reads a file of questions: a Label Studio export (a `.json` file holding a list of tasks) is read by
`qa_core.annotation.label_studio_dataset`, every other file by `qa_core.squad` (the official SQuAD JSON, JSON Lines
or Parquet in Hugging Face's layout). Every command that takes questions or gold answers from a file reads it here,
so that each reads both.

Usage example:
```python
dataset = read_questions("reviewed-export.json")  # or "dev-v2.0.json", "train.parquet", ...
gold = {example.id: example.answers for example in dataset.examples}
```
"""

from pathlib import Path

from qa_core.annotation import label_studio_dataset
from qa_core.squad import SquadDataset, json_or_none, read_squad, squad_from_json


def read_questions(path: str | Path, allow_misaligned_gold: bool = False) -> SquadDataset:
    """
    The questions of a SQuAD file (see `qa_core.squad.read_squad` for its layouts and checks) or of a Label Studio
    export, JSON or JSON-MIN (see `qa_core.annotation.label_studio_dataset` for its rules).

    :param path: The file or folder.
    :param allow_misaligned_gold: Leave misaligned gold answers out instead of raising, and list them in
        `SquadDataset.misaligned`.
    :returns: The questions, their version and whether they carry gold answers.
    :raises SquadFormatError: Listing every problem found, each naming its question id, row or task, and the file.
    :raises FileNotFoundError: When `path` does not exist.
    """
    path = Path(path)
    if path.suffix != ".json" or not path.is_file():
        return read_squad(path, allow_misaligned_gold)
    text = path.read_text(encoding="utf-8")
    document = json_or_none(text)
    if isinstance(document, list):  # a Label Studio export: a list of tasks
        return label_studio_dataset(path, document, allow_misaligned_gold)
    return squad_from_json(path, text, document, allow_misaligned_gold)


__all__ = ["read_questions"]
