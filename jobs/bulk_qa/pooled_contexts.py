"""
SQuAD input answered open-domain (`--pool-contexts`), as Haystack 1.x users evaluated a retriever and a reader on
SQuAD files: the questions' distinct contexts pooled into one corpus, every question retrieved for over all of them
(with `--retrieval bm25|dense|hybrid`), answered from what it retrieved, and its own context the one relevant
document of the recall@k and MRR the run reports (`jobs.bulk_qa.results`).

A pooled document's id is the one the closed run gives the question's context (`Document(content=context).id`,
derived from its text as Haystack derives it): a context shared by several questions is one document, and the
answers of a pooled run name the same documents as those of a closed one. The corpus lists each context once, in
the order of its first question, and is written as `_contexts/documents.parquet` in the output folder, which the
run then reads as it reads any `--documents` table (index, retrieval, join). It is derived from the questions alone:
the run's identity holds its fingerprint (positions, ids and contents, `qa_core.retrieval.fingerprint`) next to the
questions file's, so a resumed run, which keeps its index, resumes only over the same corpus.

The contexts are read in the driver: a SQuAD file is read there whole anyway (`jobs.bulk_qa.squad_input`); a
questions table with a `context` column has its `id` and `context` columns read there.
"""

from dataclasses import dataclass

import pyarrow as pa

from jobs.bulk_qa.config import WorkSettings
from jobs.bulk_qa.inputs import is_squad_style
from jobs.bulk_qa.output import CONTEXTS_FILE, CONTEXTS_FOLDER, OutputFolder
from jobs.bulk_qa.squad_input import SquadInput
from jobs.storage import InputError, parquet_dataset, redact
from jobs.tables import QUESTIONS, table_schema
from qa_core.document import Document
from qa_core.retrieval.fingerprint import fingerprint

DOCUMENTS_SCHEMA = pa.schema([("id", pa.string()), ("content", pa.string())])


@dataclass(frozen=True)
class PooledContexts:
    """
    The corpus of a `--pool-contexts` run.

    :param documents: `DOCUMENTS_SCHEMA`: each distinct context once, in the order of its first question.
    :param relevant: Each question's relevant document: its own context's id (questions without a context have
        none).
    """

    documents: pa.Table
    relevant: dict[str, list[str]]

    def fingerprint(self) -> str:
        """The corpus's fingerprint (positions, ids and contents), part of the run's identity."""
        return fingerprint(self.documents["id"].to_pylist(), self.documents["content"].to_pylist())

    def record(self) -> dict[str, int | str]:
        """What the manifest records of the corpus (`pooled_contexts`)."""
        return {
            "documents": self.documents.num_rows,
            "questions_with_context": len(self.relevant),
            "fingerprint": self.fingerprint(),
        }


def pool_contexts(question_ids: list[str], contexts: list[str | None]) -> PooledContexts:
    """
    The corpus of the questions' distinct contexts (a null or empty one is left out: that question has no
    relevant document), and each question's relevant document.

    Usage example:
    ```python
    pooled = pool_contexts(["q1", "q2"], ["Paris is in France.", "Paris is in France."])
    assert pooled.documents.num_rows == 1 and pooled.relevant["q1"] == pooled.relevant["q2"]
    ```
    """
    ids: dict[str, str] = {}  # context -> document id, in order of first appearance
    relevant = {}
    for question_id, context in zip(question_ids, contexts, strict=True):
        if not context:
            continue
        if context not in ids:
            ids[context] = Document(content=context).id
        relevant[question_id] = [ids[context]]
    documents = pa.table({"id": list(ids.values()), "content": list(ids)}, schema=DOCUMENTS_SCHEMA)
    return PooledContexts(documents, relevant)


def load_pooled_contexts(work: WorkSettings, squad: SquadInput | None) -> PooledContexts | None:
    """
    The run's pooled corpus with `work.pool_contexts`, from the SQuAD file read as `squad` or from the questions
    table's `context` column; None without `pool_contexts`.

    :raises InputError: When the questions are not SQuAD-style (no `context` column, or `document_ids` too) or
        have no context to pool.
    """
    if not work.pool_contexts:
        return None
    shown = redact(work.questions)
    if squad is not None:
        ids, contexts = squad.table["id"].to_pylist(), squad.table["context"].to_pylist()
    else:
        names = table_schema(work.questions, QUESTIONS).names
        if not is_squad_style(names):
            has = "both 'document_ids' and 'context'" if "context" in names else "no 'context' column"
            raise InputError(
                f"{shown}: --pool-contexts pools the questions' contexts into the corpus, but the questions table "
                f"has {has}: give a SQuAD file, or a questions table with 'context' and without 'document_ids'."
            )
        table = parquet_dataset(work.questions).to_table(columns=["id", "context"])
        ids, contexts = table["id"].to_pylist(), table["context"].to_pylist()
    pooled = pool_contexts(ids, contexts)
    if pooled.documents.num_rows == 0:
        raise InputError(f"{shown}: --pool-contexts: no question has a context, so there is no corpus to search.")
    return pooled


def questions_schema(schema: pa.Schema) -> pa.Schema:
    """The questions' schema as a pooled run reads them: without `context` (so that every question is retrieved for)."""
    return schema.remove(schema.get_field_index("context"))


def write_pooled_contexts(output: OutputFolder, pooled: PooledContexts) -> str:
    """
    Writes the corpus into the claimed output folder (`_contexts/documents.parquet`, atomically; a resumed run
    writes the same table again: its identity holds the corpus's fingerprint).

    :returns: The documents table's location, which the run reads as its `--documents`.
    """
    output.write_pooled_contexts(pooled.documents)
    return f"{output.uri.rstrip('/')}/{CONTEXTS_FOLDER}/{CONTEXTS_FILE}"
