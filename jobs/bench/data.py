"""
The benchmark's helpers: a real-text workload, its Parquet form for the Ray job, local models, a peak-memory
sampler, answer agreement and model FLOPs. `jobs.bench` is the command; nothing here times anything.
"""

import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from qa_core.document import Document
from qa_core.local_models import BUILDERS, TEXT_FILE

ROOT = Path(__file__).resolve().parents[2]
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MODELS_DIR = ROOT / "models"
TEMPLATES = (
    "What does {} return?",
    "Which arguments does {} accept?",
    "What is {} used for?",
    "When does {} raise an error?",
    "How do you call {}?",
    "What does the documentation say about {}?",
)


@dataclass
class Workload:
    """Questions, each with the documents to read, as both readers take them."""

    question_ids: list[str]
    queries: list[str]
    documents: list[list[Document]]  # one list per question

    def __len__(self) -> int:
        return len(self.queries)

    def chunk(self, start: int, stop: int) -> "Workload":
        """Questions `[start, stop)`."""
        return Workload(self.question_ids[start:stop], self.queries[start:stop], self.documents[start:stop])


def _pick_pages(rng: random.Random, n_pages: int, docs_per_question: int) -> tuple[int, list[int]]:
    """A question's subject page and its pages to read: the subject and `docs_per_question - 1` others, shuffled."""
    subject = rng.randrange(n_pages)
    others = rng.sample([i for i in range(n_pages) if i != subject], docs_per_question - 1)
    picked = [subject, *others]
    rng.shuffle(picked)
    return subject, picked


def make_workload(n_questions: int, docs_per_question: int = 5, seed: int = 0) -> Workload:
    """
    Real-text questions over the Python standard library documentation (`data/text/`): each asks about one
    documented name and reads that name's page plus `docs_per_question - 1` others drawn at random, so that
    lengths are mixed (200 to 6,000 characters, a median near 450). Deterministic for a seed.
    """
    pages = [json.loads(line) for line in TEXT_FILE.read_text(encoding="utf-8").splitlines()]
    documents = [Document(content=page["text"], id=page["title"]) for page in pages]
    rng = random.Random(seed)
    queries, chosen = [], []
    for index in range(n_questions):
        subject, picked = _pick_pages(rng, len(pages), docs_per_question)
        queries.append(TEMPLATES[index % len(TEMPLATES)].format(pages[subject]["title"]))
        chosen.append([documents[i] for i in picked])
    return Workload([f"q{index:07d}" for index in range(n_questions)], queries, chosen)


def make_mixed_workload(
    n_questions: int, docs_per_question: int = 5, seed: int = 0, min_chars: int = 150, max_chars: int = 3000
) -> Workload:
    """
    Questions as `make_workload` asks them, over documents of mixed length: each of a question's documents starts
    at the beginning of a page (the subject's page, and `docs_per_question - 1` others drawn at random) and runs
    on through the pages after it for a length drawn uniformly from `[min_chars, max_chars]` characters, cut back
    to a word boundary. With 384-token windows about half of the documents are split into two or three windows.
    A document's id is its first page's title and its length, so equal ids mean equal texts. Deterministic for a
    seed.
    """
    pages = [json.loads(line) for line in TEXT_FILE.read_text(encoding="utf-8").splitlines()]
    starts, pieces, position = [], [], 0
    for page in pages:
        starts.append(position)
        pieces.append(page["text"])
        position += len(page["text"]) + 2
    text = "\n\n".join(pieces) * 2  # twice, so that a document that starts on a late page can run on into the first
    rng = random.Random(seed)
    queries, chosen = [], []
    for index in range(n_questions):
        subject, picked = _pick_pages(rng, len(pages), docs_per_question)
        documents = []
        for page in picked:
            start = starts[page]
            end = start + rng.randint(min_chars, max_chars)
            cut = text.rfind(" ", start + min_chars, end)  # a word boundary, keeping at least `min_chars`
            content = text[start : cut if cut > 0 else end].rstrip()
            documents.append(Document(content=content, id=f"{pages[page]['title']}:{len(content)}"))
        queries.append(TEMPLATES[index % len(TEMPLATES)].format(pages[subject]["title"]))
        chosen.append(documents)
    return Workload([f"m{index:07d}" for index in range(n_questions)], queries, chosen)


def write_parquet(workload: Workload, folder: Path) -> tuple[str, str]:
    """Writes the workload as the Ray job reads it; returns the questions and documents paths."""
    folder.mkdir(parents=True, exist_ok=True)
    documents = {doc.id: doc.content for docs in workload.documents for doc in docs}
    questions_path, documents_path = folder / "questions.parquet", folder / "documents.parquet"
    pq.write_table(pa.table({"id": list(documents), "content": list(documents.values())}), documents_path)
    pq.write_table(
        pa.table(
            {
                "id": workload.question_ids,
                "query": workload.queries,
                "document_ids": [[doc.id for doc in docs] for docs in workload.documents],
            }
        ),
        questions_path,
    )
    return str(questions_path), str(documents_path)


def local_model(kind: str, seed: int = 0) -> Path:
    """A model built by `qa_core.local_models` (no download), cached under `models/bench-KIND-seedN`."""
    folder = MODELS_DIR / f"bench-{kind}-seed{seed}"
    if not (folder / "config.json").exists():
        BUILDERS[kind](folder, seed=seed)
    return folder


def _rss(pid: int) -> int:
    """Resident set size of a process, in bytes."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_SIZE


def _pss(pid: int) -> int:
    """Proportional set size of a process (shared pages divided among the processes sharing them), in bytes."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _descendants(pid: int) -> list[int]:
    """The process ids of every descendant of a process (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # exited while listed
        children.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in children.get(parent, [])]
        found += frontier
    return found


def _cpu_ticks(pid: int) -> int:
    """CPU time of a process (user + system, all threads; not its children), in clock ticks."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class MemorySampler:
    """
    Samples memory in a background thread while `measure()` is active and keeps the peak (Linux: reads /proc).

    `tree=False`: resident set size (RSS) of this process, every 20 ms (cheap).
    `tree=True`: proportional set size (PSS) summed over this process and all its descendants (Ray's raylet,
    workers and object store), every `interval_s` seconds: pages shared between processes, such as the object
    store's, count once in the sum, not once per process. Reading every process's PSS is not free: the kernel
    walks each one's page tables, about 70 ms of this process's CPU per sample beside a reader actor holding
    MiniLM, and it holds each process's memory map while it does; every 10 s it still cost the Ray job 5 to 9% of
    its wall time on two cores. `interval_s=None` reads no memory (the reading's `start` and `peak` are None). It
    also keeps each process's latest CPU time, read from `/proc/PID/stat` (which walks no page tables) every
    `interval_s` or, without memory readings, every second, so that the reading's `cpu_seconds` counts processes
    that exit before the end (Ray's reader actors and workers, whose CPU time no surviving parent collects). The
    longer the interval, the more a short peak can be missed, and the more CPU time a process that exits between
    samples takes with it uncounted (up to one interval's).
    """

    def __init__(self, tree: bool = False, interval_s: float | None = 1.0) -> None:
        self.tree = tree
        self.reads_memory = not tree or interval_s is not None
        self.interval = 0.02 if not tree else interval_s or 1.0
        self.cpu_ticks: dict[int, int] = {}  # with `tree`: each process's CPU time when last seen

    def current(self) -> int | None:
        """Bytes in use now; None when this sampler reads no memory."""
        if not self.tree:
            return _rss(os.getpid())
        total = 0
        for pid in [os.getpid(), *_descendants(os.getpid())]:
            try:
                self.cpu_ticks[pid] = _cpu_ticks(pid)
                total += _pss(pid) if self.reads_memory else 0
            except OSError:
                pass  # exited between listing and reading
        return total if self.reads_memory else None

    @contextmanager
    def measure(self) -> Iterator["MemoryReading"]:
        """Yields a reading whose `start`, `peak` (bytes) and `cpu_seconds` are final when the block exits."""
        reading = MemoryReading(start=self.current())
        reading.peak = reading.start
        cpu_at_start = dict(self.cpu_ticks)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(self.interval):
                reading.peak = _larger(reading.peak, self.current())

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            yield reading
        finally:
            stop.set()
            thread.join()
            reading.peak = _larger(reading.peak, self.current())
            if self.tree:
                ticks = sum(now - cpu_at_start.get(pid, 0) for pid, now in self.cpu_ticks.items())
                reading.cpu_seconds = ticks / CLOCK_TICKS


def _larger(peak: int | None, now: int | None) -> int | None:
    """The peak so far after a reading (None: no memory read)."""
    return None if now is None else max(peak or 0, now)


@dataclass
class MemoryReading:
    """Memory in use when a measured block started and its peak during the block, in bytes (None: not read)."""

    start: int | None
    peak: int | None = 0
    cpu_seconds: float | None = None  # with `tree`: CPU time of the process tree during the block

    @property
    def growth(self) -> int | None:
        """The peak minus what was in use at the start, in bytes (None: not read)."""
        return None if self.start is None or self.peak is None else self.peak - self.start


@dataclass(frozen=True)
class Measured:
    """A command's wall time and the machine's peak memory in use while it ran, above what was in use before."""

    wall_s: float
    peak_mib: float


def _memory_in_use() -> int:
    """The machine's memory in use (MemTotal - MemAvailable, /proc/meminfo): the object store's shared memory and
    every process's, each page once; reading it costs nothing next to the processes' own accounting."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(fields["MemTotal"].split()[0]) - int(fields["MemAvailable"].split()[0])) * 1024


def run_measured(command: list[str], env: dict[str, str] | None = None) -> Measured:
    """
    Runs a command to its end (with the environment `env`, else this process's), sampling the machine's memory
    every 0.5 s; raises if it fails.
    """
    start, baseline = time.perf_counter(), _memory_in_use()
    process = subprocess.Popen(command, env=env)
    peak = baseline
    while process.poll() is None:
        peak = max(peak, _memory_in_use())
        time.sleep(0.5)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
    return Measured(time.perf_counter() - start, (peak - baseline) / 2**20)


class AnswerKey(NamedTuple):
    """What two readers must agree on for one answer: its text, document and offsets, and its score."""

    data: str | None
    document_id: str | None
    start: int | None
    end: int | None
    score: float


def answer_keys(answers: list[list[Any]]) -> list[list[AnswerKey]]:
    """Keys of `ExtractedAnswer`s (ours or Haystack's: they share the field names), one list per question."""
    return [
        [
            AnswerKey(
                answer.data,
                answer.document.id if answer.document is not None else None,
                answer.document_offset.start if answer.document_offset is not None else None,
                answer.document_offset.end if answer.document_offset is not None else None,
                float(answer.score),
            )
            for answer in question
        ]
        for question in answers
    ]


def answer_table_keys(answers_folder: str, question_ids: list[str]) -> list[list[AnswerKey]]:
    """Keys of the Ray job's answers table (all shards), in the order of `question_ids`."""
    rows = pq.read_table(answers_folder).to_pylist()
    by_question: dict[str, list[dict]] = {question_id: [] for question_id in question_ids}
    for row in sorted(rows, key=lambda row: (row["question_id"], row["rank"])):
        by_question.setdefault(row["question_id"], []).append(row)
    return [
        [
            AnswerKey(row["answer"], row["document_id"], row["document_start"], row["document_end"], row["score"])
            for row in by_question[question_id]
        ]
        for question_id in question_ids
    ]


@dataclass
class Agreement:
    """How far answers agree with a reference's."""

    reference: str  # the row compared with
    share: float  # share of questions that agree (all answers, or the best one with `best_only`)
    max_score_diff: float  # largest score difference between answers with the same span, over all answers
    best_only: bool = False


TOLERANCE = 1e-4  # largest score difference for answers to count as the same as the reference's


def agreement(
    answers: list[list[AnswerKey]],
    reference: list[list[AnswerKey]],
    reference_name: str,
    tolerance: float = TOLERANCE,
    best_only: bool = False,
) -> Agreement:
    """
    A question agrees when its answers have the reference's spans in the same order with scores within
    `tolerance` (with `best_only`: when its first answer, the no-answer entry included, has the same span).
    """
    if len(answers) != len(reference):
        raise ValueError(f"{len(answers)} questions answered but {len(reference)} in the reference.")
    same, max_diff = 0, 0.0
    for ours, theirs in zip(answers, reference, strict=True):
        reference_scores = {answer[:4]: answer.score for answer in theirs}
        diffs = [abs(a.score - reference_scores[a[:4]]) for a in ours if a[:4] in reference_scores]
        max_diff = max([max_diff, *diffs])
        if best_only:
            ours, theirs = ours[:1], theirs[:1]
        if [a[:4] for a in ours] != [b[:4] for b in theirs]:
            continue
        if best_only or all(abs(a.score - b.score) <= tolerance for a, b in zip(ours, theirs, strict=True)):
            same += 1
    return Agreement(reference_name, same / len(answers) if answers else 1.0, max_diff, best_only)


def encoder_flops(config: Any, lengths: list[int]) -> float:
    """
    Forward FLOPs of a BERT-style encoder with a QA head over unpadded sequences of the given lengths:
    per layer and token 2 x (4 d^2 + 2 d f) for the projections and feed-forward, plus 4 d L for attention
    scores and their weighted sum; 4 d per token for the QA head. Embedding look-ups are free.
    """
    hidden, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = sum(lengths)
    square = sum(length * length for length in lengths)
    return layers * (2 * (4 * hidden * hidden + 2 * hidden * ff) * tokens + 4 * hidden * square) + 4 * hidden * tokens


# Dense half-precision (bf16 / fp16) tensor-core peaks, FLOP/s, by a substring of torch.cuda.get_device_name().
PEAK_HALF_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "A10": 125e12,
    "T4": 65e12,
    "V100": 125e12,
}


def peak_flops(device_name: str) -> float | None:
    """The device's dense half-precision peak from `PEAK_HALF_FLOPS`, or `None` when unknown."""
    for name, flops in PEAK_HALF_FLOPS.items():
        if name in device_name:
            return flops
    return None
