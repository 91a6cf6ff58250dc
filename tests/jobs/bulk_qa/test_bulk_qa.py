"""The bulk job end to end on a local Ray: its tables equal ExtractiveReader.run per question, whatever the sharding."""

import json
import math
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from jobs.bulk_qa import waves
from jobs.bulk_qa.config import load_config
from jobs.bulk_qa.workers.rows import PAIRS_SCHEMA, shard_of
from jobs.storage import PAIR_NOTES, InputError, ShardStore, shard_name
from jobs.tables import table_bytes
from qa_core import AnswerBuilder, Document, ExtractiveReader
from tests.jobs.conftest import (
    ROOT,
    TEXTS,
    assert_rows_match,
    assert_same_outputs,
    by_question,
    read_output,
    run_job,
    run_process,
    write_table,
)
from tests.jobs.driver_reads import DriverReads

SETTINGS = {"top_k": 4, "max_seq_length": 64, "stride": 16, "context_window_size": 60}
WITH_DOCUMENTS = ["q01", "q02", "q03", "q04", "q05", "q06", "q11", "q12"]
SETTING_FLAGS = ["--top-k", "4", "--max-seq-length", "64", "--stride", "16", "--context-window-size", "60"]
REPLIES = {
    "q01": (["Answer: it returns a list [2]", "I am not sure [1-2]"], ['{"model": "m"}', "{}"]),
    "q02": (["Answer: key and default [3] [9]"], None),
    "q08": (["Nothing to cite [1]"], ["{}"]),
}
ANSWER_BUILDER = {"pattern": r"Answer: ([^\[]*)", "reference_pattern": r"\[(\d+(?:[,-]\d+)*)\]",
                  "expand_reference_ranges": True}  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Real-text documents of mixed length (one paged, one without content) and questions over them."""
    root = tmp_path_factory.mktemp("corpus")
    documents = {f"d{i:02d}": TEXTS[i * 17][: 150 + 90 * i] for i in range(12)}
    documents["paged"] = "First page of the report.\fSecond page: the river in Maine.\fThird page ends it."
    documents["no-content"] = None
    page_numbers = {"paged": 3}
    questions = {
        "q01": ("What does this function return?", ["d00", "d01"]),
        "q02": ("Which arguments are optional?", ["d02", "d03", "d04"]),
        "q03": ("Where is the river?", ["paged"]),
        "q04": ("What is raised on error?", ["d05", "d06", "d07", "d08"]),
        "q05": ("How is the result sorted?", ["d09"]),
        "q06": ("What does the module provide?", ["d10", "d11", "d00"]),
        "q07": ("Which document is unknown?", ["d03", "nowhere"]),
        "q08": ("Is anything there?", []),
        "q09": ("What has no content?", ["no-content"]),
        "q10": ("   ", ["d01"]),
        "q11": ("What is returned twice?", ["d04", "d04"]),
        "q12": ("When is the page number used?", ["paged", "d02"]),
    }
    paths = {
        "replies": write_table(
            root / "replies.parquet",
            {
                "question_id": list(REPLIES),
                "replies": [reply for reply, _ in REPLIES.values()],
                "meta": [meta for _, meta in REPLIES.values()],
            },
        ),
        "documents": write_table(
            root / "documents.parquet",
            {
                "id": list(documents),
                "content": list(documents.values()),
                "page_number": [page_numbers.get(key) for key in documents],
                "source": ["stdlib"] * len(documents),
            },
        ),
        "questions": write_table(
            root / "questions.parquet",
            {
                "id": list(questions),
                "query": [query for query, _ in questions.values()],
                "document_ids": [ids for _, ids in questions.values()],
            },
        ),
    }
    docs = {
        key: Document(content=content, id=key, meta={"page_number": page_numbers[key]} if key in page_numbers else {})
        for key, content in documents.items()
    }
    return {"root": root, "paths": paths, "documents": docs, "questions": questions}


@pytest.fixture(scope="module")
def reader(tiny_bert_model: Path) -> ExtractiveReader:
    reader = ExtractiveReader(model=str(tiny_bert_model), **SETTINGS)
    reader.warm_up()
    return reader


DRIVER_READS = DriverReads()


@pytest.fixture(scope="module")
def job_output(local_ray, corpus: dict, tiny_bert_model: Path) -> Path:
    """
    One run over the corpus, with generator replies, two reader actors and small actor batches, so that both
    actors get work; what reaches its driver is recorded in `DRIVER_READS`. Its documents are joined as tables
    above `BROADCAST_DOCUMENTS_MAX_BYTES` are, split into parts (three here) in the run's folder (the sample job's
    test takes the broadcast join).
    """
    output = corpus["root"] / "out"
    patch = pytest.MonkeyPatch()
    DRIVER_READS.install(patch)
    try:
        status = run_partitioned_corpus_job(patch, corpus, tiny_bert_model, output, "--num-actors", "2")
    finally:
        patch.undo()
    assert status == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["documents_join"], manifest["document_parts"]) == ("partitioned", 3)
    assert not (output / "_documents").exists()  # the parts live only while the run answers
    return output


def run_partitioned_corpus_job(patch: pytest.MonkeyPatch, corpus: dict, model: Path, output: Path, *flags) -> int:
    """The corpus's job with replies, small actor batches, three shards and its documents split into 3 parts."""
    patch.setattr(waves, "BROADCAST_DOCUMENTS_MAX_BYTES", 0)
    patch.setattr(waves, "DOCUMENT_PART_BYTES", math.ceil(table_bytes(str(corpus["paths"]["documents"])) / 3))
    return run_job(
        "--questions", corpus["paths"]["questions"], "--documents", corpus["paths"]["documents"],
        "--replies", corpus["paths"]["replies"], "--output", output, "--model", model, *SETTING_FLAGS,
        "--answer-pattern", ANSWER_BUILDER["pattern"], "--reference-pattern", ANSWER_BUILDER["reference_pattern"],
        "--expand-reference-ranges", "--cpus-per-actor", "0.25", "--sequences-per-actor-batch", "4",
        "--shard-size", "5", *flags,
    )  # fmt: skip


def test_the_in_process_engine_writes_the_ray_runs_tables(
    job_output: Path, corpus: dict, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """
    The same job in this process, without Ray (the stage functions on `InProcessDataset`): the same rows in every
    table, the documents split into the same parts and joined part by part, the parts deleted afterwards.
    """
    output = corpus["root"] / "in-process"
    assert run_partitioned_corpus_job(monkeypatch, corpus, tiny_bert_model, output, "--engine", "in-process") == 0
    assert_same_outputs(output, job_output, ("answers", "questions", "generated_answers"))
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["cluster"]["engine"], manifest["documents_join"], manifest["document_parts"]) == (
        "in-process", "partitioned", 3
    )  # fmt: skip
    assert manifest["reconciled"] and not (output / "_documents").exists() and not (output / PAIR_NOTES).exists()
    # The same command again resumes: every shard kept, nothing computed.
    assert run_partitioned_corpus_job(monkeypatch, corpus, tiny_bert_model, output, "--engine", "in-process") == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["shards"]["resumed"], manifest["throughput"]["questions"]) == (3, 0)
    assert_same_outputs(output, job_output, ("answers", "questions", "generated_answers"))
    # q07's shard left uncommitted, with a note that an earlier attempt at it left for its known document: the
    # shard's wave starts without it, and q07 is answered as before.
    num_shards = manifest["shards"]["total"]
    shard = shard_of("q07", num_shards)
    (output / "_shards" / f"{shard_name(shard)}.json").unlink()
    position = next(index for index, key in enumerate(corpus["questions"]["q07"][1]) if key != "nowhere")
    stale = {"shard": shard, "question_id": "q07", "kind": "pair", "position": position, "error": "stale"}
    ShardStore(str(output)).write_pair_notes(pa.Table.from_pylist([stale], schema=PAIRS_SCHEMA))
    assert run_partitioned_corpus_job(monkeypatch, corpus, tiny_bert_model, output, "--engine", "in-process") == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["shards"]["resumed"], manifest["throughput"]["questions"]) == (
        num_shards - 1, sum(shard_of(question_id, num_shards) == shard for question_id in corpus["questions"])
    )  # fmt: skip
    assert_same_outputs(output, job_output, ("answers", "questions", "generated_answers"))


def test_no_step_loads_the_documents_table_into_the_driver(job_output: Path) -> None:
    """
    Rows reach the driver (the ids check's summary, the shards' markers, the committed tables for the results),
    but never the documents table: no row, batch or table with its `content` column.
    """
    seen = {name for name, _ in DRIVER_READS.columns}
    assert {"iter_rows", "read_table"} <= seen, "the recording saw the driver's reads (markers, committed tables)"
    assert [name for name, columns in DRIVER_READS.columns if "content" in columns] == []


def _expected(reader: ExtractiveReader, corpus: dict, question_id: str):
    query, document_ids = corpus["questions"][question_id]
    known = [corpus["documents"][key] for key in document_ids if key in corpus["documents"]]
    return reader.run(query, known)["answers"]


def test_answers_equal_reader_run_per_question(job_output: Path, reader: ExtractiveReader, corpus: dict) -> None:
    answers = by_question(read_output(job_output, "answers"))
    checked = 0
    for question_id, (query, _) in corpus["questions"].items():
        if not query.strip():
            continue
        expected = _expected(reader, corpus, question_id)
        rows = answers.get(question_id, [])
        assert len(rows) == len(expected), question_id
        for rank, (row, answer) in enumerate(zip(rows, expected, strict=True), start=1):
            assert row["rank"] == rank
            assert row["query"] == query
            assert row["score"] == pytest.approx(answer.score, abs=1e-5)
            assert row["is_no_answer"] == (answer.data is None)
            if answer.data is None:
                assert row["answer"] is None and row["document_id"] is None
                continue
            assert row["answer"] == answer.data
            assert row["document_id"] == answer.document.id
            assert (row["document_start"], row["document_end"]) == (
                answer.document_offset.start,
                answer.document_offset.end,
            )
            assert row["context"] == answer.context
            assert (row["context_start"], row["context_end"]) == (
                answer.context_offset.start,
                answer.context_offset.end,
            )
            assert row["answer_page_number"] == answer.meta.get("answer_page_number")
            checked += 1
    assert checked == 31  # the seeded model's span answers over the 9 questions with documents (q09's known ones)


def test_paged_document_gives_answer_page_numbers(job_output: Path) -> None:
    paged = [row for row in read_output(job_output, "answers") if row["document_id"] == "paged"]
    assert len(paged) == 3  # q03's two spans and q12's best
    for row in paged:
        text = "First page of the report.\fSecond page: the river in Maine.\fThird page ends it."
        assert row["answer_page_number"] == 3 + text[: row["document_start"]].count("\f")


def test_every_question_is_accounted_for_once_with_its_status(job_output: Path, corpus: dict) -> None:
    rows = read_output(job_output, "questions")
    assert [row["question_id"] for row in rows] == sorted(corpus["questions"])
    questions = {row["question_id"]: row for row in rows}
    assert questions["q07"]["status"] == "error"
    assert questions["q07"]["error"] == "unknown document ids: 'nowhere' (the known documents were read)"
    assert questions["q07"]["n_documents"] == 1
    assert questions["q08"]["status"] == "no_documents"
    assert questions["q09"]["status"] == "no_documents"
    assert questions["q10"]["status"] == "error"
    assert questions["q10"]["error"] == "the query is empty"
    assert questions["q11"]["n_documents"] == 2
    # The seeded model's best span outscores the no-answer entry for each of them (refusals: see below).
    assert {key: row["status"] for key, row in questions.items() if key in WITH_DOCUMENTS} == dict.fromkeys(
        WITH_DOCUMENTS, "answered"
    )
    assert [questions[key]["error"] for key in WITH_DOCUMENTS] == [None] * len(WITH_DOCUMENTS)
    manifest = json.loads((job_output / "manifest.json").read_text())
    assert manifest["reconciled"] is True
    assert manifest["outputs"]["questions"] == manifest["inputs"]["questions"] == 12
    assert sum(manifest["outputs"]["statuses"].values()) == 12
    assert manifest["shards"] == {"total": 3, "committed": 3, "resumed": 0}


def test_best_answer_and_no_answer_score_follow_the_answers(job_output: Path) -> None:
    questions = {row["question_id"]: row for row in read_output(job_output, "questions")}
    answers = by_question(read_output(job_output, "answers"))
    for question_id in WITH_DOCUMENTS:
        spans = [row for row in answers[question_id] if not row["is_no_answer"]]
        [no_answer] = [row["score"] for row in answers[question_id] if row["is_no_answer"]]
        question = questions[question_id]
        assert question["best_score"] == spans[0]["score"] == max(row["score"] for row in spans)
        assert question["no_answer_score"] == no_answer
        refused = no_answer > spans[0]["score"]
        assert question["status"] == ("refused" if refused else "answered")
        assert question["best_answer"] == (None if refused else spans[0]["answer"])


def test_work_reached_both_reader_actors(job_output: Path) -> None:
    manifest = json.loads((job_output / "manifest.json").read_text())
    workers = manifest["workers"]
    assert len(workers) == 2, workers
    assert all(count > 0 for count in workers.values())
    n_sequences = sum(row["n_sequences"] for row in read_output(job_output, "questions"))
    assert sum(workers.values()) == n_sequences == manifest["outputs"]["sequences"]


def test_refusal_threshold_refuses_and_keeps_every_answer(
    local_ray, corpus: dict, tiny_bert_model: Path, job_output: Path
) -> None:
    output = corpus["root"] / "refuse-all"
    status = run_job(
        "--questions", corpus["paths"]["questions"], "--documents", corpus["paths"]["documents"],
        "--output", output, "--model", tiny_bert_model, *SETTING_FLAGS, "--refusal-threshold", "0.0",
    )  # fmt: skip
    assert status == 0
    questions = {row["question_id"]: row for row in read_output(output, "questions")}
    assert [questions[key]["status"] for key in WITH_DOCUMENTS] == ["refused"] * len(WITH_DOCUMENTS)
    assert [questions[key]["best_answer"] for key in WITH_DOCUMENTS] == [None] * len(WITH_DOCUMENTS)
    without_scores = [{**row, "score": round(row["score"], 5)} for row in read_output(output, "answers")]
    assert without_scores == [{**row, "score": round(row["score"], 5)} for row in read_output(job_output, "answers")]


def test_squad_style_context_input(local_ray, tmp_path: Path, tiny_bert_model: Path, reader: ExtractiveReader) -> None:
    contexts = [TEXTS[3][:400], TEXTS[40][:900], TEXTS[3][:400]]
    queries = ["What is it for?", "What does it return?", "Which class is it?"]
    questions = write_table(
        tmp_path / "squad.parquet", {"id": ["s1", "s2", "s3"], "query": queries, "context": contexts}
    )
    output = tmp_path / "out"
    assert run_job("--questions", questions, "--output", output, "--model", tiny_bert_model, *SETTING_FLAGS) == 0
    answers = by_question(read_output(output, "answers"))
    for question_id, query, context in zip(["s1", "s2", "s3"], queries, contexts, strict=True):
        expected = reader.run(query, [Document(content=context)])["answers"]
        rows = answers[question_id]
        assert [row["answer"] for row in rows] == [answer.data for answer in expected]
        assert [row["document_id"] for row in rows if row["answer"] is not None] == [Document(content=context).id] * (
            len(rows) - 1
        )
        assert [row["score"] for row in rows] == pytest.approx([answer.score for answer in expected], abs=1e-5)


def test_replies_parsed_with_answer_builder(job_output: Path, corpus: dict) -> None:
    generated = read_output(job_output, "generated_answers")
    builder = AnswerBuilder(**ANSWER_BUILDER)
    expected_rows = []
    for question_id, (texts, metas) in REPLIES.items():
        query, document_ids = corpus["questions"][question_id]
        documents = [Document(content=None, id=key) for key in document_ids]
        meta = [json.loads(m) for m in metas] if metas else None
        for index, answer in enumerate(builder.run(query, texts, meta=meta, documents=documents)["answers"]):
            expected_rows.append(
                (question_id, index, answer.data, [d.id for d in answer.documents],
                 [d.meta["source_index"] for d in answer.documents])
            )  # fmt: skip
    actual_rows = [
        (row["question_id"], row["reply_index"], row["answer"], list(row["referenced_document_ids"]),
         list(row["source_indices"]))
        for row in generated
    ]  # fmt: skip
    assert actual_rows == expected_rows
    assert actual_rows[0] == ("q01", 0, "it returns a list ", ["d01"], [2])
    assert json.loads(generated[0]["meta"]) == {"model": "m"}


def test_command_line_wins_over_yaml(tmp_path: Path) -> None:
    config_file = tmp_path / "job.yaml"
    config_file.write_text("questions: q.parquet\noutput: out\ntop_k: 7\nno_answer: true\nstride: 64\n")
    config = load_config(["--config", str(config_file), "--top-k", "2", "--no-no-answer"])
    selection = config.selection
    assert (selection.top_k, selection.no_answer, config.tokenization.stride, config.work.questions) == (
        2, False, 64, "q.parquet",
    )  # fmt: skip
    assert config.to_dict()["top_k"] == 2


def test_no_answer_flags_switch_the_no_answer_row_on_and_off(tmp_path: Path) -> None:
    config_file = tmp_path / "job.yaml"
    config_file.write_text("questions: q.parquet\noutput: out\nno_answer: false\n")
    assert load_config(["--config", str(config_file), "--no-answer"]).selection.no_answer is True
    assert load_config(["--config", str(config_file), "--no-answer", "--no-no-answer"]).selection.no_answer is False
    assert load_config(["--config", str(config_file)]).selection.no_answer is False


def test_malformed_yaml_value_on_the_command_line_exits_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_config(["--questions", "q.parquet", "--output", "out", "--model-kwargs", "{dtype: [1"])
    assert exit_info.value.code == 2
    assert "argument --model-kwargs: not valid YAML: " in capsys.readouterr().err


def test_none_on_the_command_line_switches_an_option_off(tmp_path: Path) -> None:
    config_file = tmp_path / "job.yaml"
    config_file.write_text("questions: q.parquet\noutput: out\nscore_threshold: 0.3\n")
    flags = ["--context-window-size", "none", "--overlap-threshold", "None", "--score-threshold", "none"]
    config = load_config(["--config", str(config_file), *flags])
    selection = config.selection
    assert (selection.context_window_size, selection.overlap_threshold, selection.score_threshold) == (None, None, None)
    assert (
        load_config(["--config", str(config_file)]).selection.context_window_size == 200
    )  # a flag not given: the default


def test_none_is_refused_where_an_option_needs_a_value(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_config(["--questions", "q.parquet", "--output", "out", "--top-k", "none"])
    assert exit_info.value.code == 2
    assert "argument --top-k: invalid int value: 'none'" in capsys.readouterr().err
    config_file = tmp_path / "job.yaml"
    config_file.write_text("questions: q.parquet\noutput: out\ntop_k: null\n")
    with pytest.raises(InputError, match=r"job.yaml: top_k must be int, not null\.$"):
        load_config(["--config", str(config_file)])


def test_unknown_yaml_key_is_refused(tmp_path: Path) -> None:
    config_file = tmp_path / "job.yaml"
    config_file.write_text("questions: q.parquet\noutput: out\ntop_kk: 7\n")
    with pytest.raises(InputError, match=r"job.yaml: unknown configuration keys \['top_kk'\]"):
        load_config(["--config", str(config_file)])


def test_sample_job_writes_the_recorded_tables(local_ray, tmp_path: Path, minilm_model: Path) -> None:
    """
    The quick start's job (data/sample/job.yaml, MiniLM with its seeded head) writes the rows recorded in
    tests/jobs/bulk_qa/data/sample_tables.json: every value equal, scores within 1e-6 (they were equal to the bit where
    the record was made; other CPUs' kernels may differ in the last bits). Its small documents table is joined by
    broadcast, unknown document ids included (`job_output`'s run takes the shuffle join).
    """
    output = tmp_path / "out"
    args = ["--config", "data/sample/job.yaml", "--model", minilm_model, "--output", output, "--engine", "ray"]
    assert run_job(*args) == 0
    manifest = json.loads((output / "manifest.json").read_text())
    assert (manifest["documents_join"], manifest["cluster"]["engine"]) == ("broadcast", "ray")
    assert_recorded_sample_tables(output)


def assert_recorded_sample_tables(output: Path) -> None:
    """The sample job's tables hold the rows recorded in tests/jobs/bulk_qa/data/sample_tables.json."""
    recorded = json.loads((Path(__file__).parent / "data" / "sample_tables.json").read_text())
    for table, expected in recorded.items():
        assert expected, table
        assert_rows_match(read_output(output, table), expected, table)


def test_the_sample_job_runs_in_process_by_default_without_importing_ray(tmp_path: Path, minilm_model: Path) -> None:
    """
    The quick start's command: 12 questions on this machine run in-process, in a process where Ray cannot even be
    imported, and write the recorded tables.
    """
    output = tmp_path / "out"
    code = "import sys; sys.modules['ray'] = None; from jobs.bulk_qa import main; sys.exit(main(sys.argv[1:]))"
    result = run_process(
        [sys.executable, "-c", code, "--config", "data/sample/job.yaml", "--model", minilm_model,
         "--output", output, "--quiet"],
        300, cwd=ROOT, env={**os.environ, "RAY_ADDRESS": ""},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "in-process, no Ray, precision fp32)" in result.stdout
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["cluster"]["engine"] == "in-process"
    assert manifest["precision"] == {"setting": "fp32", "used": ["fp32"]}  # the job's default: Haystack's answers
    assert_recorded_sample_tables(output)


@pytest.mark.parametrize(("capabilities", "used"), [({"avx512_f": True}, "fp32"), ({"amx_bf16": True}, "bf16")])
def test_auto_precision_is_resolved_by_the_reader_and_reported(
    tmp_path: Path, tiny_bert_model: Path, monkeypatch: pytest.MonkeyPatch, capsys, capabilities: dict, used: str
) -> None:
    """`--precision auto` runs bf16 where the reader's CPU has bf16 units (pretended here) and fp32 elsewhere, and
    the manifest and the summary say which."""
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    output = tmp_path / "out"
    args = ["--config", "data/sample/job.yaml", "--model", tiny_bert_model, "--output", output]
    assert run_job(*args, "--engine", "in-process", "--precision", "auto", "--quiet") == 0
    assert json.loads((output / "manifest.json").read_text())["precision"] == {"setting": "auto", "used": [used]}
    assert f"precision {used} (auto))" in capsys.readouterr().out


def test_results_of_a_documents_run_predictions_and_annotated_squad(job_output: Path, corpus: dict) -> None:
    """Issue 13 on Parquet questions and documents: the prediction files, and a SQuAD v2.0 file built from them."""
    from qa_core.squad import read_squad

    questions = {row["question_id"]: row for row in read_output(job_output, "questions")}
    predictions = json.loads((job_output / "predictions.json").read_text())
    na_probs = json.loads((job_output / "na_probs.json").read_text())
    assert predictions == {key: row["best_answer"] or "" for key, row in questions.items()}
    assert na_probs == {key: 1.0 if row["no_answer_score"] is None else row["no_answer_score"]
                        for key, row in questions.items()}  # fmt: skip
    assert not (job_output / "evaluation.json").exists()
    annotated = read_squad(job_output / "annotated.squad.json")
    assert [e.id for e in annotated.examples] == [*WITH_DOCUMENTS[:6], "q07", "q11", "q12"]
    answers = by_question(read_output(job_output, "answers"))
    document = json.loads((job_output / "annotated.squad.json").read_text())
    qas = {qa["id"]: (p["context"], qa) for a in document["data"] for p in a["paragraphs"] for qa in p["qas"]}
    for example in annotated.examples:
        spans = [row for row in answers[example.id] if not row["is_no_answer"]]
        assert example.context == corpus["documents"][spans[0]["document_id"]].content  # the best span's document
        context, qa = qas[example.id]
        assert qa["predicted_answers"][0]["text"] == spans[0]["answer"]
        for span in qa["predicted_answers"]:
            assert context[span["answer_start"] : span["answer_start"] + len(span["text"])] == span["text"]
        silver = [answer.text for answer in example.answers]
        assert silver == ([spans[0]["answer"]] if questions[example.id]["status"] == "answered" else [])
