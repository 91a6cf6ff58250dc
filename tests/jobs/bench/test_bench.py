"""The benchmark command: every row and column, ratios derived from the measured numbers, the GPU script on CPU.

No timing is asserted: the numbers are whatever this machine gives; only their arithmetic is checked. Here the Ray
job is replaced by a stand-in, so that this smoke run stays fast: the stand-in returns run_batch's answers with one
question's best score moved, so the tests show that the "ray" row's agreement is computed from what `measure_ray`
returns, against run_batch's answers. The real `measure_ray` (its own Ray, the job end to end, its answers read
back from the job's table) is tests/jobs/bench/test_bench_ray.py's.
"""

import json
from pathlib import Path

import pytest
import torch

from jobs import gpu_check
from jobs.bench import throughput as bench
from jobs.bench.data import (
    TEMPLATES,
    AnswerKey,
    agreement,
    answer_keys,
    answer_table_keys,
    encoder_flops,
    make_mixed_workload,
    make_workload,
)
from qa_core.hardware import MATRIX_EXTENSIONS
from tests.jobs.conftest import write_table

ROWS = ["haystack", "run_batch", "run_batch:bf16", "run_batch:int8", "ray", "limit", "limit:bf16"]
MIXED_ROWS = ["run_batch@mixed", "limit@mixed"]  # the mixed-length set: run_batch and the limit only
COLUMNS = [
    "row", "questions", "sequences", "tokens", "padded_tokens", "seconds", "startup_s", "questions_per_s",
    "sequences_per_s", "tokens_per_s", "padding_ratio", "vs_haystack", "vs_limit", "cpu_seconds", "questions_per_cpu_s",
    "vs_haystack_cpu", "vs_limit_cpu", "mfu", "peak_mib", "growth_mib",
    "agreement", "agreement_share", "max_score_diff",
]  # fmt: skip


def fake_ray(model, workload, settings, folder, job_args, memory_every_s):
    """
    Stands in for the Ray job: run_batch's answers, but the last question's best score moved by 0.5 (beyond the
    agreement's tolerance), and fixed made-up timings; the memory sampling interval asked for in `details`.
    """
    reader = settings.reader(model)
    reader.warm_up()
    keys = answer_keys(reader.run_batch(workload.queries, workload.documents)["answers"])
    keys[-1][0] = keys[-1][0]._replace(score=keys[-1][0].score + 0.5)
    measurement = bench.Measurement("ray", len(workload), 7, padded_tokens=None, seconds=2.0, cpu_seconds=None)
    measurement.startup_seconds, measurement.peak_bytes = 3.0, 2**30
    measurement.details["memory_every_s"] = memory_every_s
    return measurement, keys


@pytest.fixture(scope="module")
def result(tiny_bert_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    output = tmp_path_factory.mktemp("bench") / "bench.json"
    patch = pytest.MonkeyPatch()
    patch.setattr(bench, "measure_ray", fake_ray)
    try:
        args = ["--model", tiny_bert_model, "--questions", 4, "--documents-per-question", 2, "--rounds", 2]
        args += ["--mixed-questions", 3]
        args += ["--precision", "bf16", "--max-seq-length", 128, "--stride", 32, "--output", output]
        found = bench.main([str(arg) for arg in args])
    finally:
        patch.undo()
    assert json.loads(output.read_text())["rows"] == json.loads(json.dumps(found["rows"], default=str))
    return found


def test_every_row_and_column(result: dict) -> None:
    assert [row["row"] for row in result["rows"]] == ROWS + MIXED_ROWS
    assert result["rows"][ROWS.index("ray")]["memory_every_s"] == bench.THROUGHPUT_MEMORY_EVERY_S
    for row in result["rows"]:
        assert set(COLUMNS) <= set(row), row["row"]
        assert row["questions"] == (3 if row["row"] in MIXED_ROWS else 4)
        assert row["seconds"] > 0 and row["peak_mib"] > 0
    table = bench.format_table(result["rows"])
    for name in ROWS + MIXED_ROWS + ["x haystack", "x limit", "padding", "agreement"]:
        assert name in table
    assert result["machine"]["cpus"] >= 1 and "command" in result
    # The CPU as detected here, never assumed: its vector ISA, matrix extensions and oneDNN's dispatch.
    cpu = result["machine"]["cpu"]
    assert cpu["capability"] == torch.backends.cpu.get_cpu_capability()
    capabilities = torch.cpu.get_capabilities()
    assert cpu["extensions"] == [name for name in MATRIX_EXTENSIONS if capabilities[name]]
    assert "AVX" in cpu["onednn_isa"]  # oneDNN's own words, e.g. "Intel AVX-512 with Intel DL Boost ..."
    assert bench.describe_machine(result["machine"]).startswith(f"bench: CPU {cpu['model']} ({cpu['capability']};")


def test_onednn_names_its_isa_on_a_cpu_without_fast_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    # oneDNN capped at AVX2 stands in for a CPU without AVX-512: its ISA is still read, not left unknown.
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert bench.onednn_isa() == "Intel AVX2"


def test_ratios_follow_from_the_measured_numbers(result: dict) -> None:
    rows = {row["row"]: row for row in result["rows"]}
    for row in rows.values():
        mixed = row["row"] in MIXED_ROWS
        assert row["questions_per_s"] == pytest.approx(row["questions"] / row["seconds"])
        assert row["sequences_per_s"] == pytest.approx(row["sequences"] / row["seconds"])
        if mixed:  # compared with the limit on the same set; Haystack does not read it
            assert row["vs_haystack"] is None and row["vs_haystack_cpu"] is None
        else:
            assert row["vs_haystack"] == pytest.approx(row["questions_per_s"] / rows["haystack"]["questions_per_s"])
        limit = rows["limit:bf16"] if row["row"].endswith("bf16") else rows["limit"]
        limit = rows["limit@mixed"] if mixed else limit
        assert row["vs_limit"] == pytest.approx(row["questions_per_s"] / limit["questions_per_s"])
        if row["cpu_seconds"]:  # the same ratios by CPU time
            assert row["questions_per_cpu_s"] == pytest.approx(row["questions"] / row["cpu_seconds"])
            if not mixed:
                haystack_cpu = rows["haystack"]["questions_per_cpu_s"]
                assert row["vs_haystack_cpu"] == pytest.approx(row["questions_per_cpu_s"] / haystack_cpu)
            assert row["vs_limit_cpu"] == pytest.approx(row["questions_per_cpu_s"] / limit["questions_per_cpu_s"])
        if row["padded_tokens"] is not None:
            assert row["padding_ratio"] == pytest.approx(row["padded_tokens"] / row["tokens"])
            assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"])
    # Each limit is the fastest of its batch shapes, every one timed; run_batch reads the same sequences.
    for name in ("limit", "limit:bf16", "limit@mixed"):
        limit = rows[name]
        assert list(limit["shape_seconds"]) == ["n8", "n16", "n32", "n64", "t2048", "t4096", "t8192"]
        assert limit["seconds"] == min(limit["shape_seconds"].values()) == limit["shape_seconds"][limit["limit_shape"]]
        assert limit["sequences"] == rows["run_batch@mixed" if "@" in name else "run_batch"]["sequences"]
    assert rows["run_batch@mixed"]["sequences"] > 2 * 3  # mixed lengths: some documents read in several windows
    assert rows["haystack"]["padding_ratio"] >= 1.0 and rows["run_batch"]["padding_ratio"] >= 1.0
    assert rows["ray"]["startup_s"] == 3.0 and rows["ray"]["tokens"] == rows["run_batch"]["tokens"]


def test_agreement_is_reported(result: dict) -> None:
    rows = {row["row"]: row for row in result["rows"]}
    assert rows["run_batch"]["agreement_share"] == 1.0  # same answers as Haystack, scores within 1e-4
    # The stand-in's answers: 3 of the 4 questions agree with run_batch, the fourth's best score is 0.5 off.
    assert (rows["ray"]["agreement_share"], rows["ray"]["max_score_diff"]) == (0.75, pytest.approx(0.5))
    assert "best vs run_batch" in rows["run_batch:int8"]["agreement"]
    assert rows["haystack"]["agreement"] is None and rows["limit"]["agreement"] is None
    names = [target["target"] for target in result["targets"]]
    assert any("1.5x haystack" in name for name in names) and any("70% of run_batch" in name for name in names)
    assert any("limit on the mixed-length set" in name for name in names)
    assert any("bf16's best span" in name for name in names) and any("bf16 >= 2x fp32" in name for name in names)


def test_table_arithmetic_on_hand_built_measurements() -> None:
    measurements = [
        bench.Measurement("haystack", 10, 40, 4000, 6000, seconds=20.0),
        bench.Measurement("run_batch", 10, 40, 4000, 4100, seconds=8.0, flops=8e12),
        bench.Measurement("run_batch:bf16", 10, 40, 4000, 4100, seconds=4.0),
        bench.Measurement("limit", 10, 40, 4000, 4100, seconds=7.6),
        bench.Measurement("limit:bf16", 10, 40, 4000, 4100, seconds=2.0),
    ]
    rows = {row["row"]: row for row in bench.table(measurements, peak=1e12)}
    assert rows["run_batch"]["vs_haystack"] == pytest.approx(2.5)
    assert rows["run_batch"]["vs_limit"] == pytest.approx(7.6 / 8.0)
    assert rows["run_batch:bf16"]["vs_limit"] == pytest.approx(0.5)  # against the bf16 limit
    assert rows["haystack"]["padding_ratio"] == pytest.approx(1.5)
    assert rows["run_batch"]["mfu"] == pytest.approx(1.0)
    met = {target["target"]: target["met"] for target in bench.targets(list(rows.values()))}
    assert met["run_batch questions/s >= 1.5x haystack"]
    assert met["run_batch >= 95% of the forward-only limit (its fastest batch shape)"]
    assert met["run_batch in bf16 >= 2x fp32"]  # 8 s against 4 s


def test_agreement_and_flops_helpers() -> None:
    same = [[AnswerKey("a", "d1", 0, 1, 0.9), AnswerKey(None, None, None, None, 0.1)]]
    close = [[AnswerKey("a", "d1", 0, 1, 0.90005), AnswerKey(None, None, None, None, 0.1)]]
    swapped = [[AnswerKey("b", "d1", 2, 3, 0.9), AnswerKey("a", "d1", 0, 1, 0.8)]]
    assert agreement(close, same, "ref").share == 1.0
    assert agreement(close, same, "ref", tolerance=1e-6).share == 0.0
    assert agreement(swapped, same, "ref", best_only=True).share == 0.0
    assert agreement(swapped, same, "ref").max_score_diff == pytest.approx(0.1)

    class Config:
        hidden_size, intermediate_size, num_hidden_layers = 2, 4, 1

    # 1 layer: 2 * (4*4 + 2*2*4) * 3 tokens + 4 * 2 * 9 (attention over a 3-token sequence); head: 4 * 2 * 3.
    assert encoder_flops(Config, [3]) == 2 * 32 * 3 + 72 + 24
    assert len(make_workload(7, 3)) == 7 and all(len(docs) == 3 for docs in make_workload(7, 3).documents)


def test_mixed_workload_has_documents_of_150_to_3000_characters() -> None:
    mixed = make_mixed_workload(200)
    assert len(mixed) == 200 and all(len(docs) == 5 for docs in mixed.documents)
    lengths = [len(doc.content) for docs in mixed.documents for doc in docs]
    assert 150 <= min(lengths) < 300 and 2700 < max(lengths) <= 3000
    assert 1200 < sorted(lengths)[len(lengths) // 2] < 1800  # drawn uniformly: a median near 1,575
    # Deterministic for a seed; one id, one text (the Ray job's documents table keys them by id).
    again = make_mixed_workload(200)
    assert [[d.content for d in docs] for docs in mixed.documents] == [
        [d.content for d in docs] for docs in again.documents
    ]
    texts = {doc.id: doc.content for docs in mixed.documents for doc in docs}
    assert all(texts[doc.id] == doc.content for docs in mixed.documents for doc in docs)
    # Each question's subject page opens one of its documents (ids are "title:length").
    for index, (query, docs) in enumerate(zip(mixed.queries, mixed.documents, strict=True)):
        prefix, suffix = TEMPLATES[index % len(TEMPLATES)].split("{}")
        subject = query.removeprefix(prefix).removesuffix(suffix)
        assert subject in {doc.id.rsplit(":", 1)[0] for doc in docs}


def test_answer_table_keys_reads_the_job_tables(tmp_path: Path) -> None:
    """`measure_ray`'s answers: the job's answers table, all shards, by question in the given order and by rank."""
    columns = ["question_id", "rank", "answer", "document_id", "document_start", "document_end", "score"]
    shards = {
        "shard-00000.parquet": [("b", 2, None, None, None, None, 0.25), ("a", 1, "x", "d1", 0, 1, 0.5)],
        "shard-00001.parquet": [("b", 1, "yz", "d2", 3, 5, 0.75)],
    }
    for name, rows in shards.items():
        table = {column: list(values) for column, values in zip(columns, zip(*rows, strict=True), strict=True)}
        write_table(tmp_path / "answers" / name, table)
    assert answer_table_keys(str(tmp_path / "answers"), ["b", "c", "a"]) == [
        [AnswerKey("yz", "d2", 3, 5, 0.75), AnswerKey(None, None, None, None, 0.25)],
        [],  # a question without rows
        [AnswerKey("x", "d1", 0, 1, 0.5)],
    ]


def test_gpu_check_runs_on_cpu(tiny_bert_model: Path, tmp_path: Path) -> None:
    args = ["--model", tiny_bert_model, "--questions", 3, "--max-batch-size", 8, "--output", tmp_path / "g.json"]
    args += ["--skip", "haystack,ray,int8,mixed", "--documents-per-question", 2, "--max-seq-length", 128]
    args += ["--stride", 32]
    found = gpu_check.main([str(arg) for arg in args])
    assert [row["row"] for row in found["rows"]] == ["run_batch", "run_batch:bf16", "limit", "limit:bf16"]
    half = found["rows"][1]
    assert " best vs run_batch, max diff " in half["agreement"]  # bf16's best answers against fp32's
    assert half["max_score_diff"] <= 0.01  # the tolerance the README states for bf16
    assert json.loads((tmp_path / "g.json").read_text())["rows"] == found["rows"]


def test_scale_mode_compares_peak_memory_at_n_and_10n(tiny_bert_model: Path, tmp_path: Path, monkeypatch) -> None:
    peaks = {3: 2000 * 2**20, 30: 2700 * 2**20}  # made up: 1.35x for 10x the questions

    def fake_ray_by_size(model, workload, settings, folder, job_args, memory_every_s):
        measurement, keys = fake_ray(model, workload, settings, folder, job_args, memory_every_s)
        measurement.peak_bytes = peaks[len(workload)]
        return measurement, keys

    monkeypatch.setattr(bench, "measure_ray", fake_ray_by_size)
    args = ["--scale", "--scale-questions", 3, "--model", tiny_bert_model, "--documents-per-question", 2]
    args += ["--max-seq-length", 128, "--stride", 32, "--output", tmp_path / "scale.json"]
    found = bench.main([str(arg) for arg in args])
    assert [(row["row"], row["questions"]) for row in found["rows"]] == [
        ("run_batch", 3), ("ray:3", 3), ("ray:30", 30)
    ]  # fmt: skip
    assert found["rows"][1]["agreement_share"] == pytest.approx(2 / 3)  # the stand-in moved one of 3 answers
    assert [row["memory_every_s"] for row in found["rows"][1:]] == [bench.SCALE_MEMORY_EVERY_S] * 2
    [target] = found["targets"]
    assert (target["value"], target["met"]) == (1.35, True)


class RecordingRow:
    """A stand-in row that records the question ids of every `run`, and times nothing but a list append."""

    def __init__(self, name: str, runs: list) -> None:
        self.name, self.runs = name, runs

    def prepare(self, work):
        return work.question_ids, bench.Counts(len(work), 1, 1, [])

    def run(self, prepared) -> None:
        self.runs.append((self.name, prepared))


def test_each_row_reads_the_first_questions_untimed_then_every_round_in_rotating_order():
    workload = make_workload(40, 1, seed=0)
    runs: list = []
    rows = [RecordingRow("a", runs), RecordingRow("b", runs)]
    measurements, _ = bench.measure_in_process(rows, workload, rounds=2, config=None)
    ids = workload.question_ids
    warm = ids[: bench.WARM_UP_QUESTIONS]
    assert runs == [("a", warm), ("b", warm), ("a", ids[:20]), ("b", ids[:20]), ("b", ids[20:]), ("a", ids[20:])]
    assert measurements["a"].questions == measurements["b"].questions == 40  # the warm-up is not counted
