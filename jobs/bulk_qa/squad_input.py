"""
SQuAD datasets as the job's questions: a `--questions` file in the official SQuAD v1.1 / v2.0 JSON layout, in
Hugging Face's `squad` / `squad_v2` layout (Parquet, a folder of Parquet, JSON Lines), or a Label Studio export of
reviewed tasks (JSON or JSON-MIN: the reviewed questions with their gold, `qa_core.annotation`), is read by
`qa_core.question_files.read_questions` in the driver, before Ray starts, and handed to Ray Data as the job's
SQuAD-style questions table (`id, query, context`) from memory. The dataset, gold answers included, stays in the
driver for the run's results (`jobs.bulk_qa.results`).

Why from memory rather than a converted Parquet file under the output folder: the run's identity is then the
original file's fingerprint (a converted file would get a new modification time at every conversion, and resume
would have to special-case it), nothing is left for `--overwrite` to clean up, and it works whatever filesystem
the output is on. The table goes through Ray's object store once.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from jobs.storage import InputError, parquet_dataset, redact
from qa_core.question_files import read_questions
from qa_core.squad import SquadDataset, SquadFormatError

# Rows per block of the questions dataset handed to Ray Data (the unit of its read-side parallelism).
ROWS_PER_BLOCK = 10_000

QUESTIONS_TABLE_SCHEMA = pa.schema([("id", pa.string()), ("query", pa.string()), ("context", pa.string())])


@dataclass(frozen=True)
class SquadInput:
    """A SQuAD dataset read as the run's questions."""

    dataset: SquadDataset
    table: pa.Table  # QUESTIONS_TABLE_SCHEMA: the dataset's ids, questions and contexts, in dataset order

    def blocks(self, columns: list[str]) -> list[pa.Table]:
        """
        The questions table's `columns` (`context` left out by a `--pool-contexts` run) in blocks of
        `ROWS_PER_BLOCK` rows, as the run's dataset is made of them.
        """
        table = self.table.select(columns)
        return [table.slice(start, ROWS_PER_BLOCK) for start in range(0, table.num_rows, ROWS_PER_BLOCK)]

    def gold_summary(self) -> dict[str, Any]:
        """What the manifest records of the dataset: version, whether it has gold, misaligned answers left out."""
        return {
            "version": self.dataset.version,
            "has_gold": self.dataset.has_gold,
            "questions": len(self.dataset.examples),
            "misaligned": [m._asdict() for m in self.dataset.misaligned],
        }


def is_squad_file(path: str) -> bool:
    """
    Whether `--questions` names a SQuAD dataset rather than the job's questions table: a `.json` / `.jsonl` file,
    or Parquet in Hugging Face's layout (`question` and `context` columns, and no `query`).
    """
    if path.endswith((".json", ".jsonl")):
        return True
    try:
        names = parquet_dataset(path).schema.names
    except (FileNotFoundError, pa.ArrowInvalid, OSError):
        return False  # the questions-table check reports it
    return {"question", "context"} <= set(names) and "query" not in names


def unreviewed_note(dataset: SquadDataset) -> str:
    """What a Label Studio export's unreviewed tasks became: left out, counted, the first ids named."""
    ids = dataset.unreviewed
    listed = ", ".join(repr(qid) for qid in ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
    return f"{len(ids)} task(s) of the Label Studio export have no review and are left out: {listed}"


def load_squad_input(questions: str | None, allow_misaligned_gold: bool) -> SquadInput | None:
    """
    Reads `--questions` when it is a SQuAD dataset (see `is_squad_file`); `None` when it is the job's own table.

    :param allow_misaligned_gold: Leave out gold answers whose `answer_start` does not index their text (and
        questions left without any), reporting them on stderr and in the manifest, instead of failing.
    :raises InputError: For a SQuAD file that is not local, cannot be read, or holds problems (misaligned gold
        answers among them, unless allowed), naming the question ids.
    """
    if not questions or not is_squad_file(questions):
        return None
    if "://" in questions and not questions.startswith("file://"):
        raise InputError(f"{redact(questions)}: a SQuAD dataset must be a local file or folder.")
    path = Path(questions.removeprefix("file://"))
    try:
        dataset = read_questions(path, allow_misaligned_gold=allow_misaligned_gold)
    except FileNotFoundError:
        raise InputError(f"{questions}: the questions file does not exist.") from None
    except SquadFormatError as error:
        hint = ""
        if any("does not match its context" in problem for problem in error.problems):
            hint = "\nPass --allow-misaligned-gold to leave misaligned gold answers out (they are reported)."
        raise InputError(f"{error}{hint}") from None
    if not dataset.examples:
        raise InputError(f"{questions}: the SQuAD dataset has no questions: there is nothing to answer.")
    if dataset.unreviewed:
        print(f"bulk-qa: warning: {unreviewed_note(dataset)}", file=sys.stderr, flush=True)
    if dataset.misaligned:
        listed = ", ".join(f"{m.id!r} ({m.text!r} at {m.answer_start})" for m in dataset.misaligned[:20])
        more = f" and {len(dataset.misaligned) - 20} more" if len(dataset.misaligned) > 20 else ""
        print(
            f"bulk-qa: warning: {len(dataset.misaligned)} gold answer(s) do not match their context and are left "
            f"out: {listed}{more}",
            file=sys.stderr,
            flush=True,
        )
    examples = dataset.examples
    table = pa.table(
        {
            "id": [example.id for example in examples],
            "query": [example.question for example in examples],
            "context": [example.context for example in examples],
        },
        schema=QUESTIONS_TABLE_SCHEMA,
    )
    return SquadInput(dataset, table)
