"""
The bulk job's configuration: one dataclass whose fields are the YAML keys and, with dashes, the command-line flags.
The command line wins over the YAML file, which wins over the defaults.
"""

import argparse
import dataclasses
import inspect
import re
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from qa_core.answer_builder import check_pattern


class InputError(Exception):
    """Unusable input or configuration: the job stops before any worker starts and exits with status 2."""


@dataclass
class JobConfig:
    """Everything the bulk QA job can be told. Field comments are the documentation of the YAML keys."""

    # Inputs and output (paths or URIs such as s3://bucket/prefix that pyarrow understands).
    questions: str | None = None  # questions Parquet: id, query, document_ids (or a SQuAD-style context)
    documents: str | None = None  # documents Parquet: id, content, optional page_number
    replies: str | None = None  # optional generator replies Parquet: question_id, replies, meta
    output: str | None = None  # folder that receives answers/, questions/, generated_answers/, manifest.json
    overwrite: bool = False  # replace the output of an earlier run made with other inputs or settings

    # Reader (qa_core.ExtractiveReader) parameters.
    model: str = "deepset/roberta-base-squad2-distilled"  # hub id or local folder of a QA model
    top_k: int = 20  # answers per question, plus the no-answer row
    score_threshold: float | None = None  # keep answers scoring at least this
    max_seq_length: int = 384  # tokens per sequence; longer documents are split
    stride: int = 128  # tokens shared by consecutive windows of a document
    max_batch_size: int | None = None  # sequences per forward pass (None: 32)
    answers_per_seq: int | None = None  # candidate spans per sequence (None: 20)
    no_answer: bool = True  # add the no-answer row
    calibration_factor: float = 0.1  # multiplies start + end logits before the sigmoid
    overlap_threshold: float | None = 0.01  # de-duplicate answers overlapping more than this; None keeps all
    max_answer_length: int | None = None  # longest answer in tokens; None: no limit
    context_window_size: int | None = 200  # characters of context around each answer; None: no context
    quantization: str | None = None  # "int8": dynamic int8 on CPU (faster, answers may differ slightly)
    model_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to from_pretrained (torch_dtype, ...)

    # AnswerBuilder parameters, for replies.
    answer_pattern: str | None = None  # regex extracting the answer from a reply (at most one group)
    reference_pattern: str | None = None  # regex finding 1-based document references, e.g. \[(\d+)\]
    last_message_only: bool = False  # parse only the last reply of each question
    return_only_referenced_documents: bool = True  # referenced_document_ids lists only referenced documents
    expand_reference_ranges: bool = False  # read [1-3,5] as documents 1, 2, 3 and 5

    # Answers policy.
    refusal_threshold: float | None = None  # refuse when no-answer score >= this; None: when it beats the best answer

    # Execution.
    address: str | None = None  # Ray cluster to join (e.g. ray://head:10001 or auto); None: start a local Ray
    num_actors: int | None = None  # reader actors; None: one per GPU, or one on a CPU-only cluster
    gpus_per_actor: float = 1.0  # GPUs each reader actor holds when the cluster has GPUs
    cpus_per_actor: float = 0.5  # logical CPUs each reader actor reserves; the pool takes at most 1/4 of the cluster
    sequences_per_actor_batch: int = 1024  # sequences handed to an actor at once (sorted by length inside)
    shard_size: int = 1000  # questions per output shard (the unit of atomic commit and of resume)
    shards_per_wave: int = 10  # shards answered by one pipeline run; bounds memory, as a wave is shuffled at once

    def reader_parameters(self) -> dict[str, Any]:
        """The `qa_core.ExtractiveReader` constructor arguments."""
        return {name: getattr(self, name) for name in READER_FIELDS}

    def answer_builder_parameters(self) -> dict[str, Any]:
        """The `qa_core.AnswerBuilder` constructor arguments, for replies."""
        return {
            "pattern": self.answer_pattern,
            "reference_pattern": self.reference_pattern,
            "last_message_only": self.last_message_only,
            "return_only_referenced_documents": self.return_only_referenced_documents,
            "expand_reference_ranges": self.expand_reference_ranges,
        }

    def to_dict(self) -> dict[str, Any]:
        """
        The resolved configuration, for the manifest and the output's identity. It holds no secrets: tokens come
        from the environment (`validate` refuses them in `model_kwargs`), and credentials written into a path or
        address (`s3://key:secret@bucket/...`, `?secret_key=...`) are masked.
        """
        values = dataclasses.asdict(self)
        for name in URI_FIELDS:
            if values[name] is not None:
                values[name] = redact(values[name])
        return values


READER_FIELDS = (
    "model",
    "top_k",
    "score_threshold",
    "max_seq_length",
    "stride",
    "max_batch_size",
    "answers_per_seq",
    "no_answer",
    "calibration_factor",
    "overlap_threshold",
    "max_answer_length",
    "context_window_size",
    "quantization",
    "model_kwargs",
)
REQUIRED = ("questions", "output")
URI_FIELDS = ("questions", "documents", "replies", "output", "address", "model")
# model_kwargs keys that carry credentials: they belong in the environment (HF_TOKEN), never in the configuration,
# which is written to the manifest and passed to every worker.
SECRET_MODEL_KWARGS = ("token", "use_auth_token")
_URI_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@]*)@")
_SECRET_QUERY = re.compile(r"(?P<key>[^?&=]*(?:key|secret|token|password|credential|signature)[^?&=]*)=[^&]*", re.I)


def redact(uri: str) -> str:
    """
    `uri` with the credentials it may carry masked: the user-info part (`s3://KEY:SECRET@bucket/...`) and query
    values whose name speaks of keys, secrets, tokens or passwords (`?secret_key=...`). Plain paths are unchanged.
    """
    uri = _URI_USERINFO.sub(r"\g<scheme>***@", uri)
    if "?" in uri:
        path, query = uri.split("?", 1)
        uri = path + "?" + _SECRET_QUERY.sub(r"\g<key>=***", query)
    return uri


def _base_type(annotation: Any) -> type:
    """`int | None` -> int."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    return typing.get_origin(annotation) or annotation


def _is_optional(annotation: Any) -> bool:
    """`int | None` -> True."""
    return type(None) in typing.get_args(annotation)


def _none_or(kind: type):
    """A command-line parser of `kind` that reads `none` as None, for the fields that may be None."""

    def parse(text: str) -> Any:
        return None if text.lower() == "none" else kind(text)

    parse.__name__ = kind.__name__
    return parse


class _BooleanFlag(argparse.BooleanOptionalAction):
    """`--x` sets True and `--no-x` False, also for an option named `no_...` (`--no-answer` / `--no-no-answer`)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, option_string == self.option_strings[0])


def _yaml_value(text: str) -> Any:
    """A command-line value written in YAML (`--model-kwargs '{dtype: torch.bfloat16}'`)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise argparse.ArgumentTypeError(f"not valid YAML: {error}") from None


def _field_comments() -> dict[str, str]:
    """`JobConfig`'s field comments, which are its documentation, by field name."""
    pattern = re.compile(r"^\s+(\w+): .*?  # (.+)$")
    return {match[1]: match[2] for match in map(pattern.match, inspect.getsource(JobConfig).splitlines()) if match}


def build_parser() -> argparse.ArgumentParser:
    """The command line: `--config` plus one flag per `JobConfig` field (dashes for underscores)."""
    parser = argparse.ArgumentParser(
        prog="bulk-qa",
        argument_default=argparse.SUPPRESS,  # only the flags given reach the configuration
        description="Bulk extractive question answering on Ray: answers every question of a Parquet table "
        "from its documents and writes answer tables.",
    )
    parser.add_argument("--config", help="YAML file with any of the options below (by their underscore names)")
    comments = _field_comments()
    for spec in fields(JobConfig):
        flag = "--" + spec.name.replace("_", "-")
        kind = _base_type(spec.type)
        default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default
        help_text = f"{comments.get(spec.name, '')} (default: {default})"
        if kind is bool:
            parser.add_argument(flag, action=_BooleanFlag, help=help_text)
        elif kind is dict:
            parser.add_argument(flag, type=_yaml_value, metavar="YAML", help=help_text)
        else:
            parse = _none_or(kind) if _is_optional(spec.type) else kind
            parser.add_argument(flag, type=parse, metavar=kind.__name__.upper(), help=help_text)
    return parser


def load_config(argv: list[str] | None = None) -> JobConfig:
    """
    Builds the configuration from the YAML file named by `--config` and the command line (which wins).

    :raises InputError: On unknown YAML keys, wrong value types or invalid values.
    """
    args = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    config_path = args.pop("config", None)
    if config_path:
        values.update(_read_yaml(config_path))
    values.update(args)
    config = JobConfig(**values)
    validate(config)
    return config


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise InputError(f"{path}: the configuration file does not exist.") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: the configuration must be a mapping of option names to values.")
    known = {spec.name: spec for spec in fields(JobConfig)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise InputError(f"{path}: unknown configuration keys {unknown}. Known keys: {sorted(known)}.")
    for name, value in data.items():
        kind = _base_type(known[name].type)
        if value is None and not _is_optional(known[name].type):
            raise InputError(f"{path}: {name} must be {kind.__name__}, not null.")
        if value is None or isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            data[name] = float(value)
            continue
        raise InputError(f"{path}: {name} must be {kind.__name__}, not {type(value).__name__} ({value!r}).")
    return data


def validate(config: JobConfig) -> None:
    """
    Checks values that would make the job fail later or give meaningless results.

    :raises InputError: Naming the option and the rule it breaks.
    """
    problems = [f"--{name.replace('_', '-')} is required" for name in REQUIRED if not getattr(config, name)]
    checks = [
        (config.top_k >= 1, f"top_k must be >= 1, not {config.top_k}"),
        (config.max_seq_length >= 8, f"max_seq_length must be >= 8, not {config.max_seq_length}"),
        (
            0 <= config.stride < config.max_seq_length,
            f"stride ({config.stride}) must be >= 0 and < max_seq_length ({config.max_seq_length})",
        ),
        (
            config.overlap_threshold is None or 0 <= config.overlap_threshold <= 1,
            f"overlap_threshold must be within [0, 1], not {config.overlap_threshold}",
        ),
        (config.calibration_factor > 0, f"calibration_factor must be > 0, not {config.calibration_factor}"),
        (
            config.max_batch_size is None or config.max_batch_size >= 1,
            f"max_batch_size must be >= 1, not {config.max_batch_size}",
        ),
        (
            config.answers_per_seq is None or config.answers_per_seq >= 1,
            f"answers_per_seq must be >= 1, not {config.answers_per_seq}",
        ),
        (
            config.max_answer_length is None or config.max_answer_length >= 1,
            f"max_answer_length must be >= 1, not {config.max_answer_length}",
        ),
        (
            config.context_window_size is None or config.context_window_size >= 0,
            f"context_window_size must be >= 0, not {config.context_window_size}",
        ),
        (
            config.score_threshold is None or 0 <= config.score_threshold <= 1,
            f"score_threshold must be within [0, 1], not {config.score_threshold}",
        ),
        (
            config.refusal_threshold is None or 0 <= config.refusal_threshold <= 1,
            f"refusal_threshold must be within [0, 1], not {config.refusal_threshold}",
        ),
        (config.quantization in (None, "int8"), f"quantization must be int8 or None, not {config.quantization!r}"),
        (config.num_actors is None or config.num_actors >= 1, f"num_actors must be >= 1, not {config.num_actors}"),
        (config.gpus_per_actor > 0, f"gpus_per_actor must be > 0, not {config.gpus_per_actor}"),
        (config.cpus_per_actor >= 0, f"cpus_per_actor must be >= 0, not {config.cpus_per_actor}"),
        (config.sequences_per_actor_batch >= 1, "sequences_per_actor_batch must be >= 1"),
        (config.shard_size >= 1, f"shard_size must be >= 1, not {config.shard_size}"),
        (config.shards_per_wave >= 1, f"shards_per_wave must be >= 1, not {config.shards_per_wave}"),
    ]
    problems += [message for ok, message in checks if not ok]
    if not isinstance(config.model_kwargs, dict):
        problems.append(f"model_kwargs must be a mapping, not {type(config.model_kwargs).__name__}")
    else:
        secrets = sorted(key for key in config.model_kwargs if key in SECRET_MODEL_KWARGS)
        if secrets:
            # The value is never echoed: it is a credential.
            problems.append(
                f"model_kwargs must not hold credentials ({', '.join(secrets)}): they would be written to the "
                "manifest and sent to every worker. Set the HF_TOKEN environment variable instead."
            )
        trust = config.model_kwargs.get("trust_remote_code", False)
        if not isinstance(trust, bool):
            problems.append(f"model_kwargs.trust_remote_code must be true or false, not {trust!r}")
    for name in ("answer_pattern", "reference_pattern"):
        try:
            check_pattern(getattr(config, name))
        except ValueError as error:
            problems.append(f"{name}: {error}")
    if problems:
        raise InputError("Invalid configuration:\n  - " + "\n  - ".join(problems))
