"""`python -m jobs.bulk_qa.results_bench`: its synthetic run scores the same under ours, evaluation.json and the official
script, exactly (no timing is asserted)."""

from jobs.bulk_qa import results_bench as bench
from qa_core.squad import squad_json
from tests.qa_core.reference import squad_v2_official


def test_the_three_evaluations_agree_exactly(capsys) -> None:
    measured = bench.main(["--questions", "200"])
    metrics = measured["metrics"]
    assert metrics["ours"] == metrics["official"] == metrics["evaluation_json"]  # exact, not approximate
    assert list(metrics["ours"]) == list(metrics["official"])
    assert metrics["ours"]["total"] == 200 and metrics["ours"]["HasAns_total"] == measured["answerable"]
    assert 0 < metrics["ours"]["HasAns_exact"] < 100 and 0 < metrics["ours"]["NoAns_exact"] < 100
    assert set(measured["statuses"]) == {"answered", "refused"}
    assert "metrics equal (ours, evaluation.json, official): True, same key order: True" in capsys.readouterr().out
    for key in ("write_results_s", "evaluate_s", "official_s", "report_s"):
        assert measured[key] > 0


def test_the_synthetic_gold_spans_index_their_contexts() -> None:
    dataset, shards = bench.synthetic_run(300, seed=1)
    assert len(shards) == 1 and len(shards[0]["questions"]["question_id"]) == 300
    for example in dataset.examples:
        for answer in example.answers:
            assert example.context[answer.answer_start : answer.answer_start + len(answer.text)] == answer.text
    official = squad_v2_official.make_qid_to_has_ans(squad_json(dataset)["data"])
    assert official == {example.id: bool(example.answers) for example in dataset.examples}
