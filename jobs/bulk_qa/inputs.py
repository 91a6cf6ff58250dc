"""
The job's inputs, checked before any worker starts: the questions table says which documents to read
(`jobs.tables` checks each table's columns), and the model can be loaded.
Every problem found here is an `InputError` naming the file, the column and, for rows, the row's id.
"""

import os
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa

from jobs.storage import InputError, redact
from jobs.tables import QUESTIONS, table_rows, table_schema
from qa_core.models import ModelSettings, load_config, load_tokenizer
from qa_core.secret import Secret

LOCAL_MODEL_HINT = (
    "Point --model at a local folder holding a question-answering model (config.json, weights, tokenizer). "
    "For an offline smoke run, `python -m qa_core.local_models minilm models/minilm-qa` builds one "
    "(its QA head is random: its answers are meaningless)."
)

LOCAL_RANKER_HINT = (
    "Point --ranker at a local folder holding a sentence-transformers CrossEncoder. For an offline run, "
    "`python -m qa_core.local_models minilm-ranker models/minilm-ranker` fine-tunes one on local data."
)


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
        _check_hub_reachable("--model", model, LOCAL_MODEL_HINT)
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


def check_ranker(model: str, token: Secret | None) -> None:
    """
    Checks, before any worker starts, that `--ranker` names a loadable ranking cross-encoder: a sequence-classification
    model with one label and a tokenizer (no custom code is run).

    :raises InputError: If a local path does not exist, the hub cannot be reached for a hub id, or the model is no
        one-label sequence classifier, or a local folder has no weights or no tokenizer.
    """
    local = Path(model).expanduser()
    if not local.exists():
        if model.startswith((".", "/", "~")) or model.count("/") > 1:
            raise InputError(f"--ranker {model}: the folder does not exist. {LOCAL_RANKER_HINT}")
        _check_hub_reachable("--ranker", model, LOCAL_RANKER_HINT)
    try:
        config = load_config(model, token)
    except (OSError, ValueError) as error:
        raise InputError(f"--ranker {model}: cannot load its configuration: {error}. {LOCAL_RANKER_HINT}") from None
    classifies = any(
        name.endswith("ForSequenceClassification") for name in getattr(config, "architectures", None) or []
    )
    if not classifies or config.num_labels != 1:
        raise InputError(
            f"--ranker {model}: a ranking cross-encoder is a sequence-classification model with 1 label, not "
            f"{', '.join(getattr(config, 'architectures', None) or [config.model_type])} with {config.num_labels}."
        )
    if local.is_dir():
        if not any(next(local.glob(pattern), None) for pattern in WEIGHT_FILES):
            raise InputError(
                f"--ranker {model}: the folder holds no model weights (*.safetensors or pytorch_model.bin)."
            )
        if not any(next(local.glob(pattern), None) for pattern in TOKENIZER_FILES):
            raise InputError(f"--ranker {model}: the folder holds no tokenizer (tokenizer.json, vocab.txt, ...).")


def _check_hub_reachable(option: str, model: str, hint: str) -> None:
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
            f"{option} {model}: not a local folder, and the model hub ({endpoint}) cannot be reached to download "
            f"it. {hint}"
        )
