"""
Writes the sample tables (questions, documents, replies, SQuAD-style questions), a small SQuAD v2.0 file
(`squad_sample.json`, over the same texts) and the questions over the sample folder of files (`files/`, asked with
`--documents data/sample/files`: retrieved for, as they name no documents) and the questions asked of every sample
document (`extraction_questions.parquet`, with `--every-document`) next to this file.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent

DOCUMENTS = [
    (
        "python",
        "Python is a high-level, general-purpose programming language. Its design philosophy emphasizes "
        "code readability with the use of significant indentation. Python was conceived in the late 1980s by Guido "
        "van Rossum at Centrum Wiskunde & Informatica in the Netherlands as a successor to the ABC programming "
        "language. Python 3.0, released in 2008, was a major revision not completely backward-compatible with "
        "earlier versions.",
        None,
    ),
    (
        "paris",
        "Paris is the capital and largest city of France. With an estimated population of two million "
        "residents, it is the centre of the Ile-de-France region. The city is a major railway, highway and "
        "air-transport hub served by two international airports: Charles de Gaulle and Orly.",
        None,
    ),
    (
        "berlin",
        "Berlin is the capital and largest city of Germany, by both area and population. It is also one "
        "of the states of Germany. Berlin straddles the banks of the Spree, which flows into the Havel in the "
        "western borough of Spandau.",
        None,
    ),
    (
        "maine",
        "Maine is the northeasternmost state of the United States. The Kennebec River rises in Moosehead "
        "Lake and flows south to the Gulf of Maine. Many visitors want to go to the river in Maine in summer, "
        "when the water is warm enough to swim.",
        None,
    ),
    (
        "rivers",
        "The Nile is a major north-flowing river in northeastern Africa. It flows into the Mediterranean "
        "Sea. The Amazon River in South America is the largest river by discharge volume of water in the world.",
        None,
    ),
    (
        "report",
        "Annual report, page one. The company was founded in 1998 in Lyon.\f"
        "Page two. Revenue grew by twelve percent to 4.2 million euros.\f"
        "Page three. The board approved a new factory in Porto, which opens in 2027.",
        1,
    ),
    (
        "ray",
        "Ray is an open-source framework for scaling Python applications. Ray Data is its library for "
        "distributed data processing: it reads Parquet files, transforms them with map_batches, and writes the "
        "results back, streaming blocks between tasks and actors.",
        None,
    ),
    ("empty", None, None),
]

QUESTIONS = [
    ("q01", "Who created Python?", ["python"]),
    ("q02", "When was Python 3.0 released?", ["python", "ray"]),
    ("q03", "What is the capital of France?", ["berlin", "paris"]),
    ("q04", "Which river flows through Berlin?", ["berlin", "rivers"]),
    ("q05", "Where does the Kennebec River rise?", ["maine", "rivers"]),
    ("q06", "How much did revenue grow?", ["report"]),
    ("q07", "Where will the new factory open?", ["report", "paris"]),
    ("q08", "What does Ray Data read?", ["ray"]),
    ("q09", "Which is the largest river by discharge?", ["rivers", "maine", "ghost-document"]),
    ("q10", "What is in the empty document?", ["empty"]),
    ("q11", "Is there any document at all?", []),
    ("q12", "", ["paris"]),
]

REPLIES = [
    ("q01", ["Answer: Guido van Rossum [1]"], ['{"model": "sample-llm"}']),
    ("q03", ["The capital is Paris [2].", "Answer: Paris [1-2]"], ['{"model": "sample-llm"}', "{}"]),
    ("q07", ["Answer: Porto [1]"], ["{}"]),
]

# SQuAD v2.0 questions over the documents above: (id, document, question, gold answers; none: impossible).
SQUAD = [
    ("sq01", "python", "Who conceived Python?", ["Guido van Rossum"]),
    ("sq02", "python", "When was Python 3.0 released?", ["2008", "in 2008"]),
    ("sq03", "python", "Which company owns Python today?", []),
    ("sq04", "paris", "What is the capital of France?", ["Paris"]),
    ("sq05", "paris", "How many residents does Paris have?", ["two million", "an estimated population of two million"]),
    ("sq06", "paris", "How many airports serve the city?", ["two"]),
    ("sq07", "berlin", "Which river does Berlin straddle?", ["the Spree", "Spree"]),
    ("sq08", "berlin", "When was Berlin founded?", []),
    ("sq09", "report", "How much did revenue grow?", ["twelve percent", "by twelve percent"]),
    ("sq10", "report", "Where will the new factory be?", ["Porto"]),
    ("sq11", "ray", "What does Ray Data read?", ["Parquet files"]),
    ("sq12", "ray", "Who founded Ray?", []),
]

# Questions over the sample folder of files (`files/`: Python documentation pages as TXT, Markdown, HTML, PDF, DOCX,
# JSONL and CSV): (id, query), no document_ids, so that BM25 retrieves each one's documents among the files'.
FILE_QUESTIONS = [
    ("f1", "What does memLevel control?"),
    ("f2", "What does the command-line parsing library produce?"),
    ("f3", "What function compiles a modified abstract syntax tree into a code object?"),
    ("f4", "What does pvariance return?"),
    ("f5", "What does the os.uname function also return?"),
    ("f6", "Which module creates temporary files and directories?"),
]

# Questions asked of every sample document (`--every-document`): (id, query); the ids name the by_document columns.
EXTRACTION_QUESTIONS = [
    ("founded", "When was it founded?"),
    ("capital-of", "What is it the capital of?"),
    ("location", "Where is it?"),
]


def squad_sample() -> dict:
    """The SQuAD v2.0 sample: one article per document, answer offsets found in the document's text."""
    contexts = {d[0]: d[1] for d in DOCUMENTS}
    articles: dict[str, list] = {}
    for qid, document, question, golds in SQUAD:
        context = contexts[document]
        answers = [{"text": text, "answer_start": context.index(text)} for text in golds]
        qa = {"id": qid, "question": question, "answers": answers, "is_impossible": not golds}
        articles.setdefault(document, []).append(qa)
    data = [
        {"title": document, "paragraphs": [{"context": contexts[document], "qas": qas}]}
        for document, qas in articles.items()
    ]
    return {"version": "v2.0", "data": data}


def write_squad_sample() -> None:
    (HERE / "squad_sample.json").write_text(json.dumps(squad_sample(), indent=1) + "\n", encoding="utf-8")


def main() -> None:
    pq.write_table(
        pa.table(
            {
                "id": [d[0] for d in DOCUMENTS],
                "content": [d[1] for d in DOCUMENTS],
                "page_number": pa.array([d[2] for d in DOCUMENTS], pa.int64()),
            }
        ),
        HERE / "documents.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "id": [q[0] for q in QUESTIONS],
                "query": [q[1] for q in QUESTIONS],
                "document_ids": pa.array([q[2] for q in QUESTIONS], pa.list_(pa.string())),
            }
        ),
        HERE / "questions.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "question_id": [r[0] for r in REPLIES],
                "replies": pa.array([r[1] for r in REPLIES], pa.list_(pa.string())),
                "meta": pa.array([r[2] for r in REPLIES], pa.list_(pa.string())),
            }
        ),
        HERE / "replies.parquet",
    )
    contexts = {d[0]: d[1] for d in DOCUMENTS}
    squad = [(f"s{i:02d}", q[1], contexts[q[2][0]]) for i, q in enumerate(QUESTIONS[:8], start=1)]
    pq.write_table(
        pa.table({"id": [s[0] for s in squad], "query": [s[1] for s in squad], "context": [s[2] for s in squad]}),
        HERE / "squad_questions.parquet",
    )
    write_squad_sample()
    pq.write_table(
        pa.table({"id": [q[0] for q in FILE_QUESTIONS], "query": [q[1] for q in FILE_QUESTIONS]}),
        HERE / "files_questions.parquet",
    )
    pq.write_table(
        pa.table({"id": [q[0] for q in EXTRACTION_QUESTIONS], "query": [q[1] for q in EXTRACTION_QUESTIONS]}),
        HERE / "extraction_questions.parquet",
    )


if __name__ == "__main__":
    main()
