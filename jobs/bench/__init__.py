"""
The benchmarks, commands that print their measurements (none runs as a test):

- `python -m jobs.bench` (`throughput`): Haystack's reader, `run_batch`, int8, the Ray job and the forward-only
  limit side by side, or `--scale` for the Ray job's memory at N and 10 N questions; `data` holds the
  workloads, memory and CPU samplers and answer agreement;
- `python -m jobs.bench.retrieval`: the BM25 index against Haystack's retriever, or with `--build` the index
  build by Ray against the single-process build at scale (and `--add-share` a grown corpus);
- `python -m jobs.bench.corpus_waves`: a retrieval run over many passages at one and at several waves;
- `python -m jobs.bench.precision --model DIR`: a model's fp32, bf16 and int8 answers on labelled questions.

The bulk job's end-of-run results step has its benchmark beside it: `python -m jobs.bulk_qa.results_bench`.
"""
