"""The filtered BM25 search benchmark on 3,000 passages: each filter's share, checked hits, ratios."""

from jobs.bench.filtered_search import FILTERS, main, report


def test_filtered_search_benchmark_reports_each_filter_against_the_unfiltered_search(capsys) -> None:
    measured = main(["--passages", "3000", "--shard-size", "1000", "--queries", "20", "--rounds", "1"])
    assert (measured["passages"], measured["shards"], measured["queries"]) == (3000, 3, 20)
    assert abs(measured["matched"]["1%"] - 0.01) < 0.005 and abs(measured["matched"]["50%"] - 0.5) < 0.03
    assert set(measured["queries_per_s"]) == {"unfiltered", *FILTERS}
    assert measured["ratio_to_unfiltered"]["1%"] == measured["queries_per_s"]["1%"] / measured["queries_per_s"]["unfiltered"]
    assert capsys.readouterr().out.startswith(report(measured))
