"""
The benchmarks: `python -m jobs.bench` (throughput: Haystack's reader, `run_batch`, int8, the Ray job and the
forward-only limit side by side, or `--scale` for the Ray job's memory at N and 10 N questions). `data.py` holds
their workloads, memory and CPU samplers and answer agreement.
"""
