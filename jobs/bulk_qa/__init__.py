"""
The bulk QA job, in two layers:

- `workers/`: what runs in Ray's workers, or in the driver in-process (the work rows, the retrieve, explode,
  tokenize, read and aggregation stages, the passages of a split index, the output tables and the shard store).
  It imports `qa_core` and itself only.
- the driver and command line: `config` (the settings of every phase, YAML and flags), `inputs` (table and model
  checks), `squad_input` (SQuAD files as questions), `ids` (the id check), `retrieval` (the run's BM25 index and
  retrieval stage), `engines` and `in_process` (where the pipelines run: Ray, or this process), `waves` (one
  wave's pipeline), `output` (the output folder's identity and manifest), `progress` (the job's own progress),
  `results` (predictions, evaluation and annotated files), `report` (manifest and summary), `html_report` and
  `report_plots` (report.html), `driver` (`main`: read -> check -> waves -> results -> manifest -> summary).

`main`, `run` and `build_parser` load on first use, so that a worker importing `jobs.bulk_qa.workers` never loads
the driver.
"""

import importlib
from typing import Any

_NAMES = {"main": "jobs.bulk_qa.driver", "run": "jobs.bulk_qa.driver", "build_parser": "jobs.bulk_qa.config"}
__all__ = list(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'jobs.bulk_qa' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)
