"""
The job's inputs: filesystems, table checks made before any worker starts, and the model check.
Every problem found here is an `InputError` naming the file, the column and, for rows, the row's id.
"""

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from jobs.storage import InputError, parquet_dataset, redact, resolve_path
from qa_core.models import ModelSettings, load_config, load_tokenizer
from qa_core.secret import Secret

LOCAL_MODEL_HINT = (
    "Point --model at a local folder holding a question-answering model (config.json, weights, tokenizer). "
    "For an offline smoke run, `python -m qa_core.local_models minilm models/minilm-qa` builds one "
    "(its QA head is random: its answers are meaningless)."
)


@dataclass(frozen=True)
class TableSpec:
    """What a table must hold: required columns with their kinds, optional ones, and which column is its id."""

    name: str
    required: dict[str, str]
    optional: dict[str, str]
    id_column: str


QUESTIONS = TableSpec(
    "questions", {"id": "string", "query": "string"}, {"document_ids": "list<string>", "context": "string"}, "id"
)
DOCUMENTS = TableSpec(
    "documents", {"id": "string", "content": "string"}, {"page_number": "integer", "file_path": "string"}, "id"
)
REPLIES = TableSpec(
    "replies", {"question_id": "string", "replies": "list<string>"}, {"meta": "list<string>"}, "question_id"
)


def _is_kind(data_type: pa.DataType, kind: str) -> bool:
    if kind == "string":
        return pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or pa.types.is_null(data_type)
    if kind == "integer":
        return pa.types.is_integer(data_type) or pa.types.is_null(data_type)
    if kind == "list<string>":
        return (pa.types.is_list(data_type) or pa.types.is_large_list(data_type)) and _is_kind(
            data_type.value_type, "string"
        )
    raise ValueError(kind)


# Ray Data's extension type for arbitrary Python objects: its values are pickles, and reading them unpickles.
PICKLED_OBJECT_TYPE = "ray.data.arrow_pickled_object"


def _holds_pickles(data_type: pa.DataType, field: pa.Field | None = None) -> bool:
    """Whether a column's type is, or nests, Ray's pickled-object type (registered in this process or not)."""
    if (
        field is not None
        and field.metadata
        and field.metadata.get(b"ARROW:extension:name") == PICKLED_OBJECT_TYPE.encode()
    ):
        return True
    if isinstance(data_type, pa.ExtensionType):
        return data_type.extension_name == PICKLED_OBJECT_TYPE or _holds_pickles(data_type.storage_type)
    if pa.types.is_dictionary(data_type):
        return _holds_pickles(data_type.value_type)
    return any(_holds_pickles(data_type.field(i).type, data_type.field(i)) for i in range(data_type.num_fields))


def table_schema(path: str, spec: TableSpec) -> pa.Schema:
    """
    Opens a Parquet file or folder (metadata only) and checks its columns against `spec`.

    :raises InputError: If the path is missing, not Parquet, lacks a required column, has a column of the wrong
        type, or has any column of pickled Python objects (input data is never unpickled).
    """
    filesystem, inner = resolve_path(path)
    shown = redact(path)
    try:
        schema = pads.dataset(inner, filesystem=filesystem, format="parquet").schema
    except FileNotFoundError:
        raise InputError(f"{shown}: the {spec.name} file does not exist.") from None
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"{shown}: the {spec.name} file is not readable Parquet: {error}") from None
    if not schema.names and filesystem.get_file_info(inner).type == pafs.FileType.Directory:
        raise InputError(f"{shown}: the {spec.name} folder holds no Parquet files.")
    for column in schema.names:
        if _holds_pickles(schema.field(column).type, schema.field(column)):
            raise InputError(
                f"{shown}: column '{column}' of the {spec.name} table holds pickled Python objects "
                f"('{PICKLED_OBJECT_TYPE}'); reading them would unpickle them, which can run arbitrary code, "
                "so the job refuses them. Drop that column or store it as plain Arrow types."
            )
    for column in spec.required:
        if column not in schema.names:
            raise InputError(f"{shown}: the {spec.name} table has no column '{column}' (columns: {schema.names}).")
    for column, kind in {**spec.required, **spec.optional}.items():
        if column in schema.names and not _is_kind(schema.field(column).type, kind):
            raise InputError(
                f"{shown}: column '{column}' of the {spec.name} table must be {kind}, not {schema.field(column).type}."
            )
    return schema


def is_squad_style(names: list[str]) -> bool:
    """Whether a questions table with these columns carries each question's document in `context` (SQuAD-style)."""
    return "document_ids" not in names and "context" in names


def check_questions_schema(path: str, has_documents: bool) -> pa.Schema:
    """
    Checks the questions table and that it says which documents to read: its `document_ids`, a SQuAD-style
    `context`, or, with `has_documents`, neither (questions without `document_ids` are retrieved for).
    """
    schema = table_schema(path, QUESTIONS)
    if "document_ids" not in schema.names and "context" not in schema.names and not has_documents:
        raise InputError(
            f"{redact(path)}: the questions table needs a 'document_ids' column (list of document ids) "
            "or a SQuAD-style 'context' column, or --documents to retrieve each question's documents from."
        )
    if "document_ids" in schema.names and not has_documents:
        raise InputError(f"{redact(path)}: the questions name document_ids, so --documents is required.")
    if table_rows(path) == 0:
        raise InputError(f"{redact(path)}: the questions table has no rows: there is nothing to answer.")
    return schema


def table_rows(path: str) -> int:
    """The rows of a Parquet file or folder, from its footers."""
    return parquet_dataset(path).count_rows()


def table_bytes(path: str) -> int:
    """The uncompressed size of a Parquet file or folder's data, from its footers."""
    return sum(
        fragment.metadata.row_group(index).total_byte_size
        for fragment in parquet_dataset(path).get_fragments()
        for index in range(fragment.metadata.num_row_groups)
    )


def read_ids(path: str, spec: TableSpec) -> pa.ChunkedArray:
    """The id column of a Parquet file or folder (no other column is read)."""
    return parquet_dataset(path).to_table(columns=[spec.id_column])[0]


WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")
# A tokenizer's vocabulary: without one, transformers builds an empty tokenizer that maps every word to [UNK].
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "*.model")


def check_model(settings: ModelSettings, token: Secret | None) -> None:
    """
    Checks, before any worker starts, that the model is a loadable question-answering model. Custom code shipped
    with a model is never run unless the user's `model_kwargs.trust_remote_code` is set.

    :raises InputError: If a local path does not exist, the hub cannot be reached for a hub id, the model's type
        has no question-answering head (or needs custom code that is not trusted), or a local folder has no
        weights or no loadable tokenizer.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES

    model, trust_remote_code = settings.model, settings.trust_remote_code
    local = Path(model).expanduser()
    if not local.exists():
        if model.startswith((".", "/", "~")) or model.count("/") > 1:
            raise InputError(f"--model {model}: the folder does not exist. {LOCAL_MODEL_HINT}")
        _check_hub_reachable(model)
    try:
        config = load_config(model, token, trust_remote_code)
    except (OSError, ValueError) as error:
        raise InputError(f"--model {model}: cannot load its configuration: {error}. {LOCAL_MODEL_HINT}") from None
    auto_map = getattr(config, "auto_map", None) or {}
    remote_qa = trust_remote_code and "AutoModelForQuestionAnswering" in auto_map
    if config.model_type not in MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES and not remote_qa:
        raise InputError(
            f"--model {model}: a '{config.model_type}' model has no question-answering head in transformers."
        )
    if not local.is_dir():
        return
    if not any(next(local.glob(pattern), None) for pattern in WEIGHT_FILES):
        raise InputError(f"--model {model}: the folder holds no model weights (*.safetensors or pytorch_model.bin).")
    if not any(next(local.glob(pattern), None) for pattern in TOKENIZER_FILES):
        raise InputError(
            f"--model {model}: the folder holds no tokenizer (tokenizer.json, vocab.txt, vocab.json or a "
            "sentencepiece .model file)."
        )
    try:
        load_tokenizer(model, token, trust_remote_code)
    except (OSError, ValueError, TypeError) as error:
        raise InputError(f"--model {model}: cannot load its tokenizer: {error}") from None


def _check_hub_reachable(model: str) -> None:
    """Fails at once when the hub cannot be reached (transformers would retry for half a minute)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        reachable = False
    else:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=5)
            reachable = True
        except urllib.error.HTTPError:
            reachable = True  # the server answered
        except (urllib.error.URLError, OSError):
            reachable = False
    if not reachable:
        raise InputError(
            f"--model {model}: not a local folder, and the model hub ({endpoint}) cannot be reached to download "
            f"it. {LOCAL_MODEL_HINT}"
        )


def input_fingerprint(path: str) -> list[list[Any]]:
    """Name, size and modification time of every file of an input, to recognise a changed input on resume."""
    filesystem, inner = resolve_path(path)
    info = filesystem.get_file_info(inner)
    infos = [info] if info.type == pafs.FileType.File else filesystem.get_file_info(pafs.FileSelector(inner, True))
    return sorted([i.path, i.size, i.mtime_ns] for i in infos if i.type == pafs.FileType.File)
