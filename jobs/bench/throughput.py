"""
Throughput benchmark: Haystack's reader against ours, in-process and on Ray, and the forward-pass limit.

    python -m jobs.bench                 # 300 real-text questions x 5 documents, MiniLM-L6 QA model, CPU,
                                         # and 100 questions x 5 documents of 150 to 3,000 characters
    python -m jobs.bench --scale         # the Ray job's peak memory at N and 10 N questions (tiny model)

Rows, all on the same questions, documents and weights:
- `haystack`: `TransformersExtractiveReader.run`, one call per question (how its users call it);
- `run_batch`: `qa_core.ExtractiveReader.run_batch`, all the round's questions in one call;
- `run_batch:int8`: the same with `quantization="int8"` (CPU only, opt-in), compared with `run_batch`;
- `run_batch:PRECISION`: the same in bf16 (or fp16 on a GPU) when `--precision` is given, compared with `run_batch`;
- `ray`: the job `jobs.bulk_qa` end to end on a local Ray; Ray's start-up and a 4-question warm-up job
  (worker processes, imports) are reported apart as `startup_s`;
- `limit`, `limit:PRECISION`: the model's forward pass alone over `run_batch`'s sequences, with the inputs padded
  and on the device beforehand (no tokenization, decoding or answers), in the fastest of several batch shapes
  (`LIMIT_SHAPES`: on a CPU, length-sorted batches of 8 to 64 sequences or of a token budget, each timed as a row
  of its own and printed apart), so that the ratio to it says how close `run_batch` comes to what the hardware does;
- `run_batch@mixed`, `limit@mixed`: the same two rows on the mixed-length set (`--mixed-questions`, each
  question with 5 documents of 150 to 3,000 characters: many documents split into several windows, most
  sequences near `max_seq_length`), where the work around the forward pass (tokenizing long documents, decoding
  spans of long sequences, ranking many candidates) weighs most.

In-process rows run interleaved, over `--rounds` chunks of the questions and in a rotating order, so that a
machine shared with other work slows all of them alike: the ratios between rows are the numbers to read. Each
in-process row first reads a few questions untimed, so that the process's first passes weigh on no row.
Peak memory is the RSS of this process for in-process rows, and the PSS summed over this process and its
descendants (Ray's processes and object store) for `ray`.
"""

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from jobs.bench.data import (
    TOLERANCE,
    Agreement,
    MemorySampler,
    Workload,
    agreement,
    answer_keys,
    answer_table_keys,
    encoder_flops,
    local_model,
    make_mixed_workload,
    make_workload,
    peak_flops,
    write_parquet,
)
from jobs.options import add_options, with_values
from qa_core.hardware import PRECISION_DTYPES, cpu_description, resolve_precision
from qa_core.inference import InferenceSettings, length_sorted_batches, model_dtype, pad_batch
from qa_core.models import ModelSettings, load_tokenizer
from qa_core.reader import ExtractiveReader
from qa_core.selection import SelectionSettings
from qa_core.tokenization import Sequence, TokenizationSettings, tokenize_pairs

MIB = 2**20
# The forward-only limit's batch shapes by device type: ("sequences", N) batches N sequences in length order,
# ("tokens", N) fills each batch up to N padded tokens (as run_batch does with `max_batch_tokens`).
LIMIT_SHAPES = {
    "cpu": (("sequences", 8), ("sequences", 16), ("sequences", 32), ("sequences", 64),
            ("tokens", 2048), ("tokens", 4096), ("tokens", 8192)),
    "cuda": (("sequences", 32), ("sequences", 64), ("sequences", 128), ("sequences", 256),
             ("tokens", 16384), ("tokens", 49152), ("tokens", 131072)),
}  # fmt: skip
# Questions each in-process row reads untimed before its rounds: enough to fill the largest shape's batches of the
# default set (a first run_batch over 67 questions after one question of warm-up took 7.2-7.3 s, after 16 questions
# 6.6 s, as its later runs; measured on the Xeon with AMX of docs/benchmarks.md).
WARM_UP_QUESTIONS = 16
# How often the Ray row samples every Ray process's PSS: never where its speed is compared with run_batch's (even
# every 10 s the samples cost the job 5 to 9% of its wall time on two cores), every second where its peak
# memory is the figure (`--scale`).
THROUGHPUT_MEMORY_EVERY_S = None
SCALE_MEMORY_EVERY_S = 1.0
COLUMNS = (  # (key, header, format) of the printed table
    ("row", "row", "{}"),
    ("questions", "questions", "{}"),
    ("seconds", "seconds", "{:.1f}"),
    ("startup_s", "start-up s", "{:.1f}"),
    ("questions_per_s", "questions/s", "{:.2f}"),
    ("sequences_per_s", "sequences/s", "{:.1f}"),
    ("tokens_per_s", "tokens/s", "{:.0f}"),
    ("padding_ratio", "padding", "{:.3f}"),
    ("vs_haystack", "x haystack", "{:.2f}"),
    ("vs_limit", "x limit", "{:.2f}"),
    ("cpu_seconds", "CPU s", "{:.1f}"),
    ("vs_haystack_cpu", "x haystack CPU", "{:.2f}"),
    ("vs_limit_cpu", "x limit CPU", "{:.2f}"),
    ("mfu", "MFU", "{:.1%}"),
    ("peak_mib", "peak MiB", "{:.0f}"),
    ("growth_mib", "+MiB", "{:.0f}"),
    ("agreement", "agreement", "{}"),
)


@dataclass(frozen=True)
class Settings:
    """The reader settings every row uses (the reader's own phases; `--top-k`, `--stride`, ... set them)."""

    tokenization: TokenizationSettings = TokenizationSettings()
    inference: InferenceSettings = InferenceSettings()
    selection: SelectionSettings = SelectionSettings()
    device: str = "cpu"

    def phases(self) -> dict[str, Any]:
        """The reader's settings by phase."""
        return {"tokenization": self.tokenization, "inference": self.inference, "selection": self.selection}

    def reader(self, model: Path, **model_settings: Any) -> ExtractiveReader:
        """Our reader with these settings."""
        settings = ModelSettings(model=str(model), **model_settings)
        return ExtractiveReader.from_settings(settings, *self.phases().values(), device=self.device)

    def batches(self, sequences: list[Sequence], dtype: torch.dtype) -> list[list[int]]:
        """The length-sorted batches `qa_core.inference.predict_spans` makes of the sequences with these settings,
        for a model whose parameters are in `dtype`."""
        inference = self.inference
        budget = inference.batch_tokens(self.device, dtype)
        return length_sorted_batches(sequences, budget, inference.max_batch_size)

    def as_dict(self) -> dict[str, Any]:
        """Every option of the reader's phases, and the device."""
        options = {key: value for phase in self.phases().values() for key, value in phase.as_dict().items()}
        return {**options, "device": self.device}

    def job_args(self) -> list[str]:
        """The job's command-line flags for these settings (every option of the reader's phases)."""
        options = {key: value for key, value in self.as_dict().items() if key != "device"}
        return [arg for key, value in options.items() for arg in _flag(key, value)]


def _flag(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else "--no-" + name.replace("_", "-")]
    return [flag, "none" if value is None else str(value)]


@dataclass
class Measurement:
    """What one row did and how long it took, summed over rounds."""

    name: str
    questions: int = 0
    sequences: int = 0
    tokens: int = 0  # real (unpadded) tokens of its sequences
    padded_tokens: int | None = 0  # tokens of its padded batches; None when unknown (the Ray job)
    seconds: float = 0.0
    cpu_seconds: float | None = 0.0  # CPU time, all threads (the Ray job: of all its processes); None if unknown
    startup_seconds: float | None = None
    peak_bytes: int | None = 0  # None when not measured (the Ray row where its speed is compared)
    growth_bytes: int | None = 0  # peak minus what was in use when the row started
    flops: float | None = None  # model FLOPs over the real tokens (for the MFU)
    agreement: Agreement | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Counts:
    """What one row's forward passes saw: sequences, real and padded tokens, and each sequence's length."""

    sequences: int
    tokens: int
    padded_tokens: int
    lengths: list[int]


def batch_counts(sequences: list[Sequence], batches: list[list[int]]) -> Counts:
    """Counts of the sequences in these batches (lists of indices into `sequences`)."""
    lengths = [len(sequence) for sequence in sequences]
    padded = sum(len(batch) * max(lengths[index] for index in batch) for batch in batches)
    return Counts(len(sequences), sum(lengths), padded, lengths)


def tokenize_workload(tokenizer: Any, work: Workload, settings: Settings) -> list[Sequence]:
    """The sequences `run_batch` makes of the workload's (question, document) pairs."""
    pairs = [(query, doc.content) for query, docs in zip(work.queries, work.documents, strict=True) for doc in docs]
    queries, contents = [query for query, _ in pairs], [content for _, content in pairs]
    return tokenize_pairs(tokenizer, queries, contents, settings.tokenization)


class HaystackRow:
    """Haystack's `TransformersExtractiveReader`, one `run` per question."""

    name = "haystack"

    def __init__(self, model: Path, settings: Settings) -> None:
        from haystack.utils import ComponentDevice
        from haystack_integrations.components.readers.transformers import TransformersExtractiveReader

        self.settings = settings
        self.reader = TransformersExtractiveReader(
            model=str(model),
            device=ComponentDevice.from_str(settings.device),
            top_k=settings.selection.top_k,
            max_seq_length=settings.tokenization.max_seq_length,
            stride=settings.tokenization.stride,
            max_batch_size=settings.inference.max_batch_size,
        )
        self.reader.warm_up()

    def prepare(self, work: Workload) -> tuple[Any, Counts]:
        """Haystack documents, and the counts of the padded tensor each `run` builds (one per question)."""
        from haystack import Document as HaystackDocument

        documents = [[HaystackDocument(content=doc.content, id=doc.id) for doc in docs] for docs in work.documents]
        sequences = tokens = padded = 0
        for query, docs in zip(work.queries, work.documents, strict=True):
            encoded = self.reader.tokenizer(
                [query] * len(docs),
                [doc.content for doc in docs],
                padding=True,
                truncation=True,
                max_length=self.settings.tokenization.max_seq_length,
                stride=self.settings.tokenization.stride,
                return_overflowing_tokens=True,
                return_tensors="pt",
            )
            sequences += encoded.input_ids.shape[0]
            tokens += int(encoded.attention_mask.sum())
            padded += encoded.input_ids.numel()
        return (work.queries, documents), Counts(sequences, tokens, padded, [])

    def run(self, prepared: Any) -> list[list[Any]]:
        queries, documents = prepared
        return [
            self.reader.run(query=query, documents=docs)["answers"]
            for query, docs in zip(queries, documents, strict=True)
        ]


class RunBatchRow:
    """`qa_core.ExtractiveReader.run_batch` over all the round's questions."""

    def __init__(
        self, model: Path, settings: Settings, quantization: str | None = None, precision: str | None = None
    ) -> None:
        self.name = "run_batch" + (f":{quantization}" if quantization else "") + (f":{precision}" if precision else "")
        self.settings = settings
        if precision == "fp16":  # no reader precision (those are for bf16 units): a dtype, as a user would give it
            model_settings: dict[str, Any] = {"model_kwargs": {"dtype": "torch.float16"}}
        else:
            model_settings = {"precision": precision or "fp32"}
        self.reader = settings.reader(model, quantization=quantization, **model_settings)
        self.reader.warm_up()

    def prepare(self, work: Workload) -> tuple[Any, Counts]:
        sequences = tokenize_workload(self.reader._tokenizer, work, self.settings)
        batches = self.settings.batches(sequences, model_dtype(self.reader._model))
        return (work.queries, work.documents), batch_counts(sequences, batches)

    def run(self, prepared: Any) -> list[list[Any]]:
        queries, documents = prepared
        return self.reader.run_batch(queries, documents)["answers"]


class LimitRow:
    """The model's forward pass alone over `run_batch`'s sequences, in length-sorted batches of one shape."""

    def __init__(self, model: Path, settings: Settings, shape: tuple[str, int], precision: str | None = None) -> None:
        from transformers import AutoModelForQuestionAnswering

        self.shape = shape
        self.name = "limit" + (f":{precision}" if precision else "") + f"/{shape_label(shape)}"
        self.settings = settings
        self.device = torch.device(settings.device)
        self.tokenizer = load_tokenizer(str(model))
        loaded = AutoModelForQuestionAnswering.from_pretrained(model).to(self.device)
        self.model = (loaded.to(PRECISION_DTYPES[precision]) if precision else loaded).eval()

    def prepare(self, work: Workload) -> tuple[Any, Counts]:
        sequences = tokenize_workload(self.tokenizer, work, self.settings)
        kind, size = self.shape
        if kind == "tokens":
            batches = length_sorted_batches(sequences, max_tokens=size)
        else:
            batches = length_sorted_batches(sequences, max_tokens=sys.maxsize, max_sequences=size)
        tensors = []
        for indices in batches:
            padded = pad_batch([sequences[index] for index in indices], self.tokenizer.pad_token_id)
            tensors.append((padded["input_ids"].to(self.device), padded["attention_mask"].to(self.device)))
        return tensors, batch_counts(sequences, batches)

    def run(self, prepared: Any) -> None:
        with torch.inference_mode():
            for input_ids, attention_mask in prepared:
                self.model(input_ids=input_ids, attention_mask=attention_mask)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def shape_label(shape: tuple[str, int]) -> str:
    """`n16` for batches of 16 sequences, `t4096` for batches of up to 4,096 padded tokens."""
    kind, size = shape
    return ("n" if kind == "sequences" else "t") + str(size)


def fastest_limits(measurements: dict[str, Measurement]) -> dict[str, Measurement]:
    """
    The measurements with each limit's shape rows (`limit/t4096`, `limit:bf16/n16@mixed`, ...) replaced by one row
    (`limit`, `limit:bf16@mixed`): the fastest shape's, with every shape's seconds in its details.
    """
    kept: dict[str, Measurement] = {}
    shapes: dict[str, dict[str, Measurement]] = {}
    for name, measurement in measurements.items():
        if "/" not in name:
            kept[name] = measurement
            continue
        base, _, rest = name.partition("/")
        label, at, data_set = rest.partition("@")
        shapes.setdefault(base + at + data_set, {})[label] = measurement
    for name, by_shape in shapes.items():
        label, best = min(by_shape.items(), key=lambda item: item[1].seconds)
        best.name = name
        best.details.update(limit_shape=label, shape_seconds={key: m.seconds for key, m in by_shape.items()})
        kept[name] = best
    return kept


def measure_in_process(
    rows: list[Any], workload: Workload, rounds: int, config: Any, suffix: str = ""
) -> tuple[dict, dict]:
    """
    Runs the rows interleaved: the questions in `rounds` chunks, every row on each chunk, the order rotating. Each
    row first reads the first `WARM_UP_QUESTIONS` questions once, untimed, so that no row pays the process's first
    passes (kernel selection, the allocator's growth to full batches) in its measurement.

    :param suffix: Appended to each row's name in the results (`"@mixed"` for the mixed-length set).
    :returns: Measurements and answers (`AnswerKey` lists, one per question) by row name.
    """
    sampler = MemorySampler(tree=False)
    measurements = {row.name: Measurement(row.name + suffix) for row in rows}
    answers: dict[str, list] = {row.name: [] for row in rows}
    for row in rows:
        row.run(row.prepare(workload.chunk(0, min(WARM_UP_QUESTIONS, len(workload))))[0])
    bounds = [(len(workload) * i // rounds, len(workload) * (i + 1) // rounds) for i in range(rounds)]
    for round_index, (start, stop) in enumerate(bounds):
        for row in rows[round_index % len(rows) :] + rows[: round_index % len(rows)]:
            prepared, counts = row.prepare(workload.chunk(start, stop))
            gc.collect()
            with sampler.measure() as memory:
                started, cpu_started = time.perf_counter(), time.process_time()
                found = row.run(prepared)
                seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
            del prepared
            measurement = measurements[row.name]
            measurement.questions += stop - start
            measurement.sequences += counts.sequences
            measurement.tokens += counts.tokens
            measurement.padded_tokens += counts.padded_tokens
            measurement.seconds += seconds
            measurement.cpu_seconds += cpu_seconds
            measurement.peak_bytes = max(measurement.peak_bytes, memory.peak)
            measurement.growth_bytes = max(measurement.growth_bytes, memory.growth)
            if counts.lengths and config is not None:
                measurement.flops = (measurement.flops or 0.0) + encoder_flops(config, counts.lengths)
            if found is not None:
                answers[row.name] += answer_keys(found)
            print(f"  round {round_index + 1}/{rounds} {row.name}{suffix}: {seconds:.1f} s", flush=True)
    return (
        {name + suffix: measurement for name, measurement in measurements.items()},
        {name + suffix: found for name, found in answers.items()},
    )


def measure_ray(
    model: Path, workload: Workload, settings: Settings, folder: Path, job_args: list[str], memory_every_s: float | None
) -> tuple[Measurement, list]:
    """
    The Ray job end to end on a fresh local Ray. Start-up (Ray's, plus a 4-question warm-up job that starts the
    worker processes) is timed apart; the measured job then runs on the warm Ray, reader actors included.

    :param memory_every_s: How often the processes' PSS is sampled (see `MemorySampler`: each sample takes CPU
        and memory-map time from the job it measures); None: never (the row's peak memory is then None).
    :returns: The measurement (tokens and padding left to the caller) and the job's answers.
    """
    import ray

    from jobs.bulk_qa import main as bulk_qa

    questions, documents = write_parquet(workload, folder / "inputs")
    warm_questions, warm_documents = write_parquet(workload.chunk(0, 4), folder / "warm-up")
    common = ["--model", str(model), "--overwrite", *settings.job_args()]
    sampler = MemorySampler(tree=True, interval_s=memory_every_s)
    started = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        if (
            bulk_qa(
                ["--questions", warm_questions, "--documents", warm_documents, "--output", str(folder / "warm")]
                + common
                + job_args
            )
            != 0
        ):
            raise RuntimeError("the Ray warm-up job failed")
        startup = time.perf_counter() - started
        output = folder / "out"
        with sampler.measure() as memory:
            started = time.perf_counter()
            status = bulk_qa(
                ["--questions", questions, "--documents", documents, "--output", str(output)] + common + job_args
            )
            seconds = time.perf_counter() - started
    finally:
        ray.shutdown()
    if status != 0:
        raise RuntimeError(f"the Ray job exited with status {status}")
    manifest = json.loads((output / "manifest.json").read_text())
    measurement = Measurement(
        "ray",
        questions=len(workload),
        sequences=manifest["outputs"]["sequences"],
        padded_tokens=None,
        seconds=seconds,
        cpu_seconds=memory.cpu_seconds,
        startup_seconds=startup,
        peak_bytes=memory.peak,
        growth_bytes=memory.growth,
        details={"job_timings": manifest["timings"], "memory_every_s": memory_every_s},
    )
    return measurement, answer_table_keys(str(output / "answers"), workload.question_ids)


def table(measurements: list[Measurement], peak: float | None = None) -> list[dict[str, Any]]:
    """
    The table's rows: throughput, padding ratio, ratios to `haystack` and to the limit, MFU and memory.

    A row's limit is `limit:DTYPE` for a `...:DTYPE` row when measured, else `limit`; a row on another data set
    (`run_batch@mixed`) is compared with the rows of the same set (`limit@mixed`, `haystack@mixed`). Ratios
    compare questions per second (the rows of a set answer the same questions).
    """
    by_name = {m.name: m for m in measurements}

    def rate(measurement: Measurement | None) -> float | None:
        return measurement.questions / measurement.seconds if measurement and measurement.seconds else None

    def cpu_rate(measurement: Measurement | None) -> float | None:
        return measurement.questions / measurement.cpu_seconds if measurement and measurement.cpu_seconds else None

    def ratio(numerator: float | None, denominator: float | None) -> float | None:
        return numerator / denominator if numerator and denominator else None

    rows = []
    for m in measurements:
        name, at, data_set = m.name.partition("@")
        precision = name.split(":", 1)[1] if ":" in name else None
        limit = by_name.get(f"limit:{precision}{at}{data_set}") or by_name.get(f"limit{at}{data_set}")
        haystack, own_rate = by_name.get(f"haystack{at}{data_set}"), rate(m)
        found = m.agreement
        rows.append(
            {
                "row": m.name,
                "questions": m.questions,
                "sequences": m.sequences,
                "tokens": m.tokens,
                "padded_tokens": m.padded_tokens,
                "seconds": m.seconds,
                "cpu_seconds": m.cpu_seconds,
                "startup_s": m.startup_seconds,
                "questions_per_s": own_rate,
                "sequences_per_s": m.sequences / m.seconds if m.seconds else None,
                "tokens_per_s": m.tokens / m.seconds if m.seconds and m.tokens else None,
                "padding_ratio": m.padded_tokens / m.tokens if m.padded_tokens and m.tokens else None,
                "vs_haystack": ratio(own_rate, rate(haystack)),
                "vs_limit": ratio(own_rate, rate(limit)),
                "questions_per_cpu_s": cpu_rate(m),
                "vs_haystack_cpu": ratio(cpu_rate(m), cpu_rate(haystack)),
                "vs_limit_cpu": ratio(cpu_rate(m), cpu_rate(limit)),
                "mfu": m.flops / m.seconds / peak if m.flops and m.seconds and peak else None,
                "peak_mib": None if m.peak_bytes is None else m.peak_bytes / MIB,
                "growth_mib": None if m.growth_bytes is None else m.growth_bytes / MIB,
                "agreement": None
                if found is None
                else f"{found.share:.3f} {'best' if found.best_only else 'all'} vs {found.reference}, "
                f"max diff {found.max_score_diff:.1e}",
                "agreement_share": None if found is None else found.share,
                "max_score_diff": None if found is None else found.max_score_diff,
                **m.details,
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as aligned text columns; empty cells for values not measured."""
    columns = [(key, header, fmt) for key, header, fmt in COLUMNS if any(row.get(key) is not None for row in rows)]
    cells = [[header for _, header, _ in columns]]
    cells += [["" if row.get(key) is None else fmt.format(row[key]) for key, _, fmt in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in cells]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """
    The issue's targets that this run's rows can decide: each with its value and whether it is met, by wall-clock
    time and, for ratios of speeds, also by CPU time (`value_cpu`, `met_cpu`), which a machine shared with other
    work disturbs much less.
    """
    by_name = {row["row"]: row for row in rows}
    found = []

    def check(name: str, value: float | None, threshold: float, value_cpu: float | None = None, least=True) -> None:
        if value is None:
            return
        target = {"target": name, "threshold": threshold, "value": round(value, 4)}
        target["met"] = value >= threshold if least else value <= threshold
        if value_cpu is not None:
            target.update(value_cpu=round(value_cpu, 4), met_cpu=value_cpu >= threshold)
        found.append(target)

    run_batch, ray, mixed = by_name.get("run_batch"), by_name.get("ray"), by_name.get("run_batch@mixed")
    if run_batch:
        check("run_batch questions/s >= 1.5x haystack", run_batch["vs_haystack"], 1.5, run_batch["vs_haystack_cpu"])
        check(f"run_batch answers agree with haystack (scores within {TOLERANCE:g})", run_batch["agreement_share"], 1.0)
        name = "run_batch >= 95% of the forward-only limit (its fastest batch shape)"
        check(name, run_batch["vs_limit"], 0.95, run_batch["vs_limit_cpu"])
        check("run_batch padding ratio <= 1.1", run_batch["padding_ratio"], 1.1, least=False)
    if mixed:
        name = "run_batch >= 95% of the forward-only limit on the mixed-length set"
        check(name, mixed["vs_limit"], 0.95, mixed["vs_limit_cpu"])
    bf16 = by_name.get("run_batch:bf16")
    if run_batch and bf16:
        speedup = bf16["questions_per_s"] / run_batch["questions_per_s"]
        cpu = bf16["questions_per_cpu_s"] / run_batch["questions_per_cpu_s"] if bf16["questions_per_cpu_s"] else None
        check("run_batch in bf16 >= 2x fp32", speedup, 2.0, cpu)
        check("bf16's best span = fp32's for >= 97% of the questions", bf16["agreement_share"], 0.97)
    if run_batch and ray and ray["questions_per_s"]:
        name = f"ray job (without start-up) >= 70% of run_batch (on {ray['questions']} questions; target: >= 2000)"
        value = ray["questions_per_s"] / run_batch["questions_per_s"]
        cpu = ray["questions_per_cpu_s"] / run_batch["questions_per_cpu_s"] if ray["questions_per_cpu_s"] else None
        check(name, value, 0.7, cpu)
    return found


def format_targets(found: list[dict[str, Any]]) -> str:
    """One line per target: met or not, by wall-clock time and by CPU time where both apply."""
    lines = []
    for target in found:
        verdict = "MET    " if target["met"] else "NOT MET"
        line = f"  {verdict}  {target['target']}: {target['value']}"
        if "value_cpu" in target:
            line += f" (by CPU time: {target['value_cpu']}, {'met' if target['met_cpu'] else 'not met'})"
        lines.append(line)
    return "\n".join(lines)


def machine(device: str) -> dict[str, Any]:
    """The machine the run was on: its CPU (model, vector ISA, matrix extensions, oneDNN's ISA), torch's threads."""
    described = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "cpu": {**cpu_description(), "onednn_isa": onednn_isa()},
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
    }
    if device.startswith("cuda"):
        described["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return described


def onednn_isa() -> str | None:
    """The instruction set oneDNN (torch's CPU matrix kernels) dispatches to here, from the verbose start-up line of its
    first primitive, in a subprocess so that this process's output stays clean; None where it says nothing. The
    primitive is a float32 convolution, which torch hands to oneDNN on every x86 CPU (a bf16 matrix product goes to
    oneDNN only where the CPU has fast bf16, so it says nothing on an AVX2 machine)."""
    code = "import torch; torch.nn.functional.conv2d(torch.ones(16, 3, 32, 32), torch.ones(8, 3, 3, 3))"
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    for line in found.stdout.splitlines():
        if ",isa:" in line:
            return line.split(",isa:", 1)[1].strip()
    return None


def describe_machine(described: dict[str, Any]) -> str:
    """One line: the CPU model, its extensions, torch's threads and oneDNN's ISA (and the GPU where one is used)."""
    cpu = described["cpu"]
    line = (
        f"bench: CPU {cpu['model']} ({cpu['capability']}; matrix extensions: {', '.join(cpu['extensions']) or 'none'})"
        f", torch threads {described['torch_threads']}, oneDNN ISA: {cpu['onednn_isa'] or 'unknown'}"
    )
    return line + (f", GPU {described['gpu']}" if "gpu" in described else "")


def format_limit_shapes(rows: list[dict[str, Any]]) -> str:
    """Each limit row's seconds by batch shape, its fastest marked."""
    lines = []
    for row in rows:
        if "shape_seconds" in row:
            shapes = ", ".join(
                f"{label} {seconds:.1f}" + ("*" if label == row["limit_shape"] else "")
                for label, seconds in row["shape_seconds"].items()
            )
            lines.append(f"  {row['row']}: {shapes}")
    return "forward-only seconds by batch shape (n: sequences per batch, t: padded tokens; * fastest):\n" + "\n".join(
        lines
    )


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(prog="python -m jobs.bench", description=__doc__.split("\n\n")[0])
    add_options(parser, Settings().phases())
    parser.add_argument("--model", help="QA model folder (default: MiniLM-L6 built locally; tiny-bert with --scale)")
    parser.add_argument("--questions", type=int, default=300, help="questions (default 300)")
    parser.add_argument(
        "--documents-per-question", type=int, default=5, help="documents each question is read in (default 5)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the questions' draw")
    parser.add_argument(
        "--mixed-questions",
        type=int,
        default=100,
        help="questions of the mixed-length set, 5 documents of 150 to 3,000 characters each (default 100): "
        "run_batch and limit rows, when neither is skipped; 0 or --skip mixed leaves it out",
    )
    parser.add_argument("--rounds", type=int, default=6, help="chunks the in-process rows are interleaved over")
    parser.add_argument("--skip", default="", help="rows to leave out, comma-separated (haystack,int8,ray,...)")
    parser.add_argument(
        "--precision",
        choices=["bf16", "fp16", "auto"],
        help="add run_batch and limit rows in this precision (auto: bf16 where the device has bf16 units, else none)",
    )
    parser.add_argument(
        "--device", help="torch device every row runs on (not given: cuda:0 where a GPU is visible, else cpu)"
    )
    parser.add_argument("--threads", type=int, help="torch threads in this process (not given: one per CPU)")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak, for the MFU (GPUs: looked up)")
    parser.add_argument("--ray-args", default="", help="extra flags for the Ray job, e.g. '--num-actors 2'")
    parser.add_argument("--scale", action="store_true", help="measure the Ray job's peak memory at N and 10 N")
    parser.add_argument("--scale-questions", type=int, default=5000, help="N for --scale (default 5000)")
    parser.add_argument("--work-dir", help="where inputs and job outputs go (default: a temporary folder)")
    parser.add_argument("--output", default="out/bench/bench.json", help="the JSON results file")
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark, prints its table and writes it as JSON; returns what it wrote."""
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads or os.cpu_count())
    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    described = machine(device)
    print(describe_machine(described), flush=True)
    settings = Settings(**with_values(Settings().phases(), vars(args)), device=device)
    skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    with tempfile.TemporaryDirectory(prefix="bench-") as temporary:
        folder = Path(args.work_dir or temporary)
        run = scale if args.scale else compare
        result = run(args, settings, skip, folder)
    result.update(machine=described, command="python -m jobs.bench " + " ".join(argv or sys.argv[1:]))
    print("\n" + format_table(result["rows"]))
    if any("shape_seconds" in row for row in result["rows"]):
        print(format_limit_shapes(result["rows"]))
    print(format_targets(result["targets"]))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {output}")
    return result


def compare(args: argparse.Namespace, settings: Settings, skip: set[str], folder: Path) -> dict[str, Any]:
    """The side-by-side comparison on one workload."""
    from transformers import AutoConfig

    model = Path(args.model) if args.model else local_model("minilm")
    workload = make_workload(args.questions, args.documents_per_question, args.seed)
    config = AutoConfig.from_pretrained(model)
    cpu = settings.device == "cpu"
    precision = args.precision and resolve_precision(args.precision, settings.device)
    precision = None if precision == "fp32" else precision  # auto without bf16 units: fp32 alone, no extra rows
    shapes = LIMIT_SHAPES[torch.device(settings.device).type]
    print(f"bench: {len(workload)} questions x {args.documents_per_question} documents, model {model}", flush=True)
    candidates = [
        ("haystack", lambda: HaystackRow(model, settings)),
        ("run_batch", lambda: RunBatchRow(model, settings)),
        ("int8", lambda: RunBatchRow(model, settings, quantization="int8") if cpu else None),
        ("precision", lambda: RunBatchRow(model, settings, precision=precision) if precision else None),
        *(("limit", lambda shape=shape: LimitRow(model, settings, shape)) for shape in shapes),
        *(("precision", lambda shape=shape: LimitRow(model, settings, shape, precision) if precision else None)
          for shape in shapes),
    ]  # fmt: skip
    rows = [row for key, build in candidates if key not in skip and (row := build()) is not None]
    measurements, answers = measure_in_process(rows, workload, args.rounds, config)
    # The mixed-length set is there for run_batch's ratio to the limit: those rows only, in fp32.
    run_batch = [row for row in rows if row.name == "run_batch"]
    limits = [row for row in rows if row.name.startswith("limit/")]
    if "mixed" not in skip and args.mixed_questions > 0 and run_batch and limits:
        mixed = make_mixed_workload(args.mixed_questions, args.documents_per_question, args.seed)
        print(f"bench: {len(mixed)} questions x {args.documents_per_question} documents of mixed length", flush=True)
        found, _ = measure_in_process(run_batch + limits, mixed, args.rounds, config, suffix="@mixed")
        measurements.update(found)
    measurements = fastest_limits(measurements)
    # Full answer lists against Haystack; the faster modes' best answers against fp32 run_batch.
    references = {"run_batch": "haystack", "ray": "haystack", "run_batch:int8": "run_batch"}
    references[f"run_batch:{precision}"] = "run_batch"
    if "ray" not in skip:
        try:
            measurement, answers["ray"] = measure_ray(
                model, workload, settings, folder, args.ray_args.split(), THROUGHPUT_MEMORY_EVERY_S
            )
        except Exception as error:  # noqa: BLE001 - a failed job is reported in its row; the other rows stand
            print(f"bench: the Ray job failed: {error}", flush=True)
            measurement = Measurement("ray", len(workload), details={"error": str(error)[-2000:]})
        if "run_batch" in measurements:  # the job tokenizes as run_batch does
            measurement.tokens, measurement.flops = measurements["run_batch"].tokens, measurements["run_batch"].flops
        measurements["ray"] = measurement
    for name, measurement in measurements.items():
        reference = references.get(name)
        if answers.get(name) and answers.get(reference):
            best_only = reference == "run_batch"
            measurement.agreement = agreement(answers[name], answers[reference], reference, TOLERANCE, best_only)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if peak is None and settings.device.startswith("cuda"):
        peak = peak_flops(torch.cuda.get_device_name(torch.device(settings.device)))
    order = ["haystack", "run_batch", f"run_batch:{precision}", "run_batch:int8", "ray", "limit", f"limit:{precision}"]
    order += ["run_batch@mixed", "limit@mixed"]
    rows_out = table([measurements[name] for name in order if name in measurements], peak)
    return {
        "mode": "compare",
        "model": str(model),
        "settings": settings.as_dict(),
        "rows": rows_out,
        "targets": targets(rows_out),
    }


def scale(args: argparse.Namespace, settings: Settings, skip: set[str], folder: Path) -> dict[str, Any]:
    """
    The Ray job at N and 10 N questions, each on a fresh Ray; run_batch in-process at N, for the answers to agree
    with (its speed is no target here: on the tiny model the job's fixed costs are most of its time).
    """
    model = Path(args.model) if args.model else local_model("tiny-bert")
    sizes = [args.scale_questions, 10 * args.scale_questions]
    measurements, answers = [], {}
    if "run_batch" not in skip:
        small = make_workload(sizes[0], args.documents_per_question, args.seed)
        print(f"bench --scale: run_batch on {sizes[0]} questions, model {model}", flush=True)
        found, answers = measure_in_process([RunBatchRow(model, settings)], small, 1, None)
        measurements.append(found["run_batch"])
    for size in sizes:
        print(f"bench --scale: the Ray job on {size} questions", flush=True)
        workload = make_workload(size, args.documents_per_question, args.seed)
        measurement, keys = measure_ray(
            model, workload, settings, folder / f"n{size}", args.ray_args.split(), SCALE_MEMORY_EVERY_S
        )
        measurement.name = f"ray:{size}"
        if size == sizes[0] and answers.get("run_batch"):
            measurement.agreement = agreement(keys, answers["run_batch"], "run_batch", TOLERANCE)
        measurements.append(measurement)
        del workload, keys
    rows_out = table(measurements)
    small_ray, large_ray = rows_out[-2], rows_out[-1]
    growth = large_ray["peak_mib"] / small_ray["peak_mib"]
    found = [
        {
            "target": f"Ray job peak memory x{growth:.2f} for 10x questions (< 1.5)",
            "value": round(growth, 3),
            "threshold": 1.5,
            "met": growth < 1.5,
        }
    ]
    return {"mode": "scale", "model": str(model), "settings": settings.as_dict(), "rows": rows_out, "targets": found}


if __name__ == "__main__":
    main()
