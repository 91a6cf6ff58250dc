"""`python -m jobs.bench`: the throughput benchmark."""

from jobs.bench.throughput import main

main()
