"""
Every option of the job, each field of each phase's settings in `JobConfig`, is settable by its own name in the
YAML file and with dashes on the command line: one case per field, parsed into a `JobConfig` without running.
"""

from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.bulk_qa.config import JobConfig, load_config
from jobs.options import base_type

REQUIRED = {"questions": "q.parquet", "output": "out"}
# A valid value other than the default where the generic choice below is not one (a choice among names, a rule
# tying it to another option).
VALUES: dict[str, Any] = {
    "questions": "other-q.parquet",
    "output": "other-out",
    "quantization": "int8",
    "precision": "auto",
    "bm25_algorithm": "BM25Okapi",
    "bm25_parameters": {"k1": 1.2},
    "unicode_normalization": "NFKC",
    "remove_substrings": ["a b", "c"],
    "retrieval": "hybrid",
    "embedding_similarity": "cosine",
    "embedding_precision": "bf16",
    "embedding_search_precision": "bf16",
    "ann": "hnsw",
    "join_mode": "distribution_based_rank_fusion",
    "join_weights": {"bm25": 1, "dense": 2},
    "filters": {"field": "meta.year", "operator": "==", "value": 2020},
    "filter_fields": ["year"],
    "encoding": "cp1252",
    "ranker_meta_fields_to_embed": ["page_number"],
    "ranker_precision": "bf16",
}
CHOICES = {"no_answer_source": ("haystack", "model"), "engine": ("auto", "ray")}  # the other choice than the default
COMPANIONS = {
    "split_overlap": {"split_length": 5},
    "retrieval": {"embedding_model": "m"},
    "ann": {"retrieval": "dense", "embedding_model": "m"},
    "by_document_csv": {"every_document": True},
}  # the options a field's other value needs beside it
FIELDS = [(phase, name) for phase, settings in JobConfig().phases().items() for name in settings.types()]


def other_value(phase: str, name: str) -> Any:
    """A valid value of the field that is not its default."""
    if name in VALUES:
        return VALUES[name]
    settings = JobConfig().phases()[phase]
    default, kind = getattr(settings, name), base_type(settings.types()[name])
    if name in CHOICES:
        return next(choice for choice in CHOICES[name] if choice != default)
    if kind is bool:
        return not default
    if kind is int:
        return 3 if default in (None, 3) else default + 1
    if kind is float:
        return 0.25 if default in (None, 0.25) else default / 2
    if kind is dict:
        return {"revision": "main"}
    return "value-" + name


def flag_args(name: str, value: Any) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag if value else "--no-" + name.replace("_", "-")]
    if isinstance(value, dict):
        return [flag, "{" + ", ".join(f"{key}: {item}" for key, item in value.items()) + "}"]
    return [flag, str(value)]


def test_every_field_is_a_case() -> None:
    assert len(FIELDS) == len(set(name for _, name in FIELDS)) == len(JobConfig().to_dict())


@pytest.mark.parametrize(("phase", "name"), FIELDS, ids=[name for _, name in FIELDS])
def test_field_settable_in_yaml_and_on_the_command_line(phase: str, name: str, tmp_path: Path) -> None:
    value = other_value(phase, name)
    assert getattr(JobConfig().phases()[phase], name) != value, "the test value must differ from the default"
    required = {**REQUIRED, **COMPANIONS.get(name, {})}
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump({**required, name: value}))
    from_yaml = load_config(["--config", str(config_file)])
    assert getattr(getattr(from_yaml, phase), name) == value
    base = [arg for key, item in required.items() for arg in flag_args(key, item)]
    from_flags = load_config([*base, *flag_args(name, value)])
    assert getattr(getattr(from_flags, phase), name) == value
    assert from_flags == from_yaml
