"""The filtered BM25 search benchmark on 3,000 passages: each filter's share, checked hits, ratios."""

from jobs.bench.filtered_search import FILTERS, main, report


def test_filtered_search_benchmark_reports_each_filter_against_the_unfiltered_search(capsys) -> None:
    measured = main(["--passages", "3000", "--shard-size", "1000", "--queries", "20", "--rounds", "1"])
    assert (measured["passages"], measured["shards"], measured["queries"]) == (3000, 3, 20)
    assert abs(measured["matched"]["1%"] - 0.01) < 0.005 and abs(measured["matched"]["50%"] - 0.5) < 0.03
    assert set(measured["queries_per_s"]) == {"unfiltered", *FILTERS}
    assert measured["ratio_to_unfiltered"]["1%"] == measured["queries_per_s"]["1%"] / measured["queries_per_s"]["unfiltered"]
    assert capsys.readouterr().out.startswith(report(measured))


def test_over_an_index_built_by_jobs_index_the_masks_come_from_the_fields_it_keeps(tmp_path, capsys) -> None:
    """`--index`: jobs.index builds it once (bucket kept per shard); a second run searches it as it is."""
    flags = ["--passages", "2000", "--queries", "10", "--rounds", "1", "--index", str(tmp_path / "index")]
    built = main(flags)
    assert (built["passages"], built["shards"]) == (2000, 1) and built["build_s"] > 0
    assert (tmp_path / "index-documents.parquet").is_file()
    again = main(flags)
    assert again["build_s"] is None and again["matched"] == built["matched"]
    assert abs(built["matched"]["1%"] - 0.01) < 0.006 and abs(built["matched"]["50%"] - 0.5) < 0.04
    assert "(built before)" in capsys.readouterr().out
