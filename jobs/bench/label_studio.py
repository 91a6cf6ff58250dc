"""
The Label Studio push/pull benchmark (prints only): N synthetic review tasks (`qa_core.annotation.label_studio_tasks`
on contexts with emoji, a third refused) pushed into a new project of a running Label Studio with
`jobs.label_studio.push`, pushed again (the idempotent second push: it lists the project and imports nothing), and
pulled back as a JSON export read through `qa_core.annotation` (`jobs.label_studio.pull`). Prints each step's
seconds as one JSON line. The server is the user's: start one first, e.g.

    LABEL_STUDIO_USER_TOKEN=bench-token-0123456789 LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true \\
    LABEL_STUDIO_USERNAME=bench@example.com LABEL_STUDIO_PASSWORD=bench-password \\
    .venv-ls/bin/label-studio start --internal-host 127.0.0.1 --port 8089 --no-browser &
    LABEL_STUDIO_API_KEY=bench-token-0123456789 .venv/bin/python -m jobs.bench.label_studio \\
        --url http://127.0.0.1:8089 --tasks 10000
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from jobs.label_studio import TOKEN_ENV, LabelStudio, pull, push
from qa_core.annotation import PredictedSpan, Prediction, label_studio_tasks
from qa_core.squad import SquadDataset, SquadExample


def synthetic_tasks(n: int) -> list[dict]:
    """`n` review tasks of ~300-character contexts, each with its answer (or refusal) and one other span."""
    examples, predictions = [], {}
    for i in range(n):
        answer = f"answer {i} 🐊"
        context = f"Paragraph {i} 𝔘: " + "some filler text about the topic. " * 8 + f"The answer is {answer}."
        start = context.index(answer)
        spans = [
            PredictedSpan(answer, start, 0.5 + (i % 50) / 100),
            PredictedSpan("filler", context.index("filler"), 0.1),
        ]
        refused = i % 3 == 0
        status, given = ("refused", None) if refused else ("answered", answer)
        examples.append(SquadExample(f"bench-{i:06d}", None, f"What is answer {i}?", context))
        predictions[examples[-1].id] = Prediction(status, given, 0.6 if refused else 0.2, spans)
    return label_studio_tasks(SquadDataset(examples, "2.0", False), predictions, "bench@000000000000")


def main() -> None:
    """Command-line entry point: prints the timings."""
    parser = argparse.ArgumentParser(description="Label Studio push/pull benchmark (prints only).")
    parser.add_argument("--url", required=True, help="a running Label Studio")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--token-env", default=TOKEN_ENV)
    args = parser.parse_args()
    client = LabelStudio(args.url, os.environ[args.token_env])
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "label_studio.json"
        source.write_text(json.dumps(synthetic_tasks(args.tasks), ensure_ascii=False), encoding="utf-8")
        title = f"bench {args.tasks} {time.strftime('%Y%m%d-%H%M%S')}"
        timings = {"tasks": args.tasks}
        started = time.perf_counter()
        first = push(client, source, title)
        timings["push_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        second = push(client, source, title)
        timings["second_push_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        pulled = pull(client, title, Path(folder) / "export.json", "JSON")
        timings["pull_s"] = round(time.perf_counter() - started, 2)
    if (first["imported"], second["imported"], pulled["unreviewed"]) != (args.tasks, 0, args.tasks):
        raise SystemExit(f"unexpected counts: push {first}, second push {second}, pull {pulled}")
    timings["push_and_pull_s"] = round(timings["push_s"] + timings["pull_s"], 2)
    print(json.dumps(timings))


if __name__ == "__main__":
    main()
