"""
The bulk job's configuration, by phase: each phase's settings class (defined next to the code that uses it)
gives its fields, defaults, documentation and checks; the YAML keys are the fields' names and the command-line
flags the same names with dashes. The command line wins over the YAML file, which wins over the defaults.

A new reader option reaches the job by being a field of its phase's settings class: nothing here lists fields.
"""

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from jobs.ingest.stage import IngestSettings
from jobs.options import add_options, base_type, is_optional, with_values
from jobs.ranker_settings import RankingSettings
from jobs.retrieval_settings import RetrievalSettings
from jobs.run_settings import RunSettings
from jobs.storage import InputError, redact
from qa_core.answer_builder import AnswerBuilderSettings
from qa_core.inference import InferenceSettings
from qa_core.ingest import CleanerSettings
from qa_core.models import ModelSettings
from qa_core.refusal import RefusalSettings
from qa_core.selection import SelectionSettings
from qa_core.settings import Settings, at_least, setting
from qa_core.tokenization import TokenizationSettings


@dataclass(frozen=True)
class WorkSettings(Settings):
    """What the run answers, and how its output is sharded."""

    # On a cluster of several nodes, a local path of these must hold the same files on every node (see CLUSTER_PATHS).
    questions: str | None = setting(None, "questions Parquet (id, query, document_ids or context) or a SQuAD file")
    documents: str | None = setting(None, "documents Parquet (id, content, optional page_number), or a folder of files")
    replies: str | None = setting(None, "optional generator replies Parquet: question_id, replies, meta")
    shard_size: int = setting(
        1000, "questions per output shard (the unit of atomic commit and of resume); with every_document: pairs"
    )
    allow_misaligned_gold: bool = setting(False, "SQuAD: report and leave out gold that misses its context")
    # SQuAD input (a SQuAD file, or questions with a `context` column) answered open-domain
    # (jobs.bulk_qa.pooled_contexts); off: each question reads its own context
    pool_contexts: bool = setting(
        False, "pool the distinct contexts as the corpus, retrieve for all (recall@k, MRR reported)"
    )
    # jobs.bulk_qa.every_document: each (question, document) pair is answered as a question naming that document
    every_document: bool = setting(
        False, "ask each question of every document, no retrieval; adds by_document/, a row per document"
    )

    def problems(self) -> list[str]:
        required = [] if self.questions else ["--questions is required"]
        if self.pool_contexts and self.documents:
            required.append(
                f"pool_contexts makes the corpus of the questions' contexts: leave out --documents "
                f"{redact(self.documents)}"
            )
        return required + at_least("shard_size", self.shard_size, 1)


# model_kwargs keys that carry credentials: they belong in the environment (HF_TOKEN), never in the configuration,
# which is written to the manifest and passed to every worker.
SECRET_MODEL_KWARGS = ("token", "use_auth_token")


@dataclass(frozen=True)
class JobConfig:
    """Everything the bulk QA job can be told, by phase. Every field of every phase is a YAML key and a flag."""

    work: WorkSettings = field(default_factory=WorkSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    tokenization: TokenizationSettings = field(default_factory=TokenizationSettings)
    inference: InferenceSettings = field(default_factory=InferenceSettings)
    # The job's answers come with 200 characters of context by default (the reader's default is none).
    selection: SelectionSettings = field(default_factory=lambda: SelectionSettings(context_window_size=200))
    replies: AnswerBuilderSettings = field(default_factory=AnswerBuilderSettings)
    refusal: RefusalSettings = field(default_factory=RefusalSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    ranking: RankingSettings = field(default_factory=RankingSettings)
    # A --documents folder of files is converted with these (`jobs.bulk_qa.corpus`).
    ingest: IngestSettings = field(default_factory=IngestSettings)
    cleaning: CleanerSettings = field(default_factory=CleanerSettings)
    run: RunSettings = field(default_factory=RunSettings)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> "JobConfig":
        """A configuration from option values by name (any subset; the others keep their defaults)."""
        return cls(**with_values(cls().phases(), values))

    def phases(self) -> dict[str, Settings]:
        """The settings of each phase, by phase name."""
        return {name: getattr(self, name) for name in PHASES}

    def problems(self) -> list[str]:
        """Every phase's problems, then the job's own rules."""
        problems = [problem for phase in self.phases().values() for problem in phase.problems()]
        if isinstance(self.model.model_kwargs, dict):
            secrets = sorted(key for key in self.model.model_kwargs if key in SECRET_MODEL_KWARGS)
            if secrets:
                # The value is never echoed: it is a credential.
                problems.append(
                    f"model_kwargs must not hold credentials ({', '.join(secrets)}): they would be written to the "
                    "manifest and sent to every worker. Set the HF_TOKEN environment variable instead."
                )
        if self.run.by_document_csv and not self.work.every_document:
            problems.append("by_document_csv writes the table of an every_document run: add --every-document")
        return problems

    def to_dict(self) -> dict[str, Any]:
        """
        The resolved configuration by option name, for the manifest and the output's identity. It holds no
        secrets: tokens come from the environment (`problems` refuses them in `model_kwargs`), and credentials
        written into a path or address (`s3://key:secret@bucket/...`, `?secret_key=...`) are masked.
        """
        values = {key: value for phase in self.phases().values() for key, value in phase.as_dict().items()}
        for name in URI_FIELDS:
            if values[name] is not None:
                values[name] = redact(values[name])
        return values

    def identity(self) -> dict[str, Any]:
        """The options that make the output what it is: all but the run's (which a resumed run may change)."""
        run = set(RunSettings.types())
        return {key: value for key, value in self.to_dict().items() if key not in run}


PHASES: dict[str, type[Settings]] = {spec.name: spec.default_factory().__class__ for spec in fields(JobConfig)}
OPTIONS: dict[str, tuple[str, Any]] = {
    key: (phase_name, annotation) for phase_name, phase in PHASES.items() for key, annotation in phase.types().items()
}
# The paths a run on a Ray cluster of several nodes needs on every node (checked before any work: jobs.shared_paths).
CLUSTER_PATHS = (
    "On a Ray cluster of several nodes, the cluster's tasks write --output and read the Parquet --questions, "
    "--documents, --replies, an --index and a --model or --embedding-model folder on whichever node runs them: put "
    "them in object storage (s3://, gs://) or on a shared mount every node sees at the same path (copies of the same "
    "files on every node also do for the inputs). A SQuAD-file --questions and --config are read by the driver "
    "alone. The job checks this from every node before any work and stops with exit 2 naming the path otherwise."
)
URI_FIELDS = ("questions", "documents", "replies", "output", "address", "model", "index", "ranker")


def build_parser() -> argparse.ArgumentParser:
    """The command line: `--config` plus one flag per option of every phase."""
    parser = argparse.ArgumentParser(
        prog="bulk-qa",
        argument_default=argparse.SUPPRESS,  # only the flags given reach the configuration
        description="Bulk extractive question answering on Ray: answers every question of a Parquet table "
        "from its documents and writes answer tables. " + CLUSTER_PATHS,
    )
    parser.add_argument("--config", help="YAML file with any of the options below (by their underscore names)")
    add_options(parser, JobConfig().phases())
    return parser


def load_config(argv: list[str] | None = None) -> JobConfig:
    """
    Builds the configuration from the YAML file named by `--config` and the command line (which wins).

    :raises InputError: On unknown YAML keys, wrong value types or invalid values, all problems at once.
    """
    args = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    config_path = args.pop("config", None)
    if config_path:
        values.update(_read_yaml(config_path))
    values.update(args)
    config = JobConfig.from_values(values)
    problems = config.problems()
    if problems:
        raise InputError("Invalid configuration:\n  - " + "\n  - ".join(problems))
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
    unknown = sorted(set(data) - set(OPTIONS))
    if unknown:
        raise InputError(f"{path}: unknown configuration keys {unknown}. Known keys: {sorted(OPTIONS)}.")
    for name, value in data.items():
        annotation = OPTIONS[name][1]
        kind = base_type(annotation)
        if value is None and not is_optional(annotation):
            raise InputError(f"{path}: {name} must be {kind.__name__}, not null.")
        if value is None or isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            data[name] = float(value)
            continue
        raise InputError(f"{path}: {name} must be {kind.__name__}, not {type(value).__name__} ({value!r}).")
    return data
