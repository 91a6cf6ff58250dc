"""
The bulk QA job, in two layers:

- `workers/`: what runs in Ray's workers (the work rows, the explode, tokenize, read and aggregation stages, the
  output tables and the shard store). It imports `qa_core` and itself only.
- the driver and command line: `config` (the settings of every phase, YAML and flags), `inputs` (table and model
  checks, reading), `ids` (the id check), `waves` (one wave's pipeline), `output` (the output folder's identity
  and manifest), `report` (manifest and summary), `driver` (`main`: read -> check -> waves -> manifest -> summary).

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
