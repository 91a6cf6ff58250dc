"""Writes the sample tables (questions, documents, replies, SQuAD-style questions) next to this file."""

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


if __name__ == "__main__":
    main()
