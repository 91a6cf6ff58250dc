"""
Fine-tuning on the command line: `python -m jobs.train --train FILE --output DIR [...]`.

The loop is `qa_core.training.loop.train`; this package reads and checks the data, runs the loop in this process
or data-parallel on Ray Train (`--num-workers N`, see `ray_train`), and writes a model folder that
`ExtractiveReader(model=DIR)` loads. It imports nothing from the rest of `jobs/`.
"""
