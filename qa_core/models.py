"""
Which model answers, and the one place that loads its tokenizer and weights (with the hub token, wherever a hub
call can happen). transformers and torch load only when a function here is called.
"""

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from qa_core.hardware import PRECISIONS
from qa_core.secret import Secret
from qa_core.settings import Settings, setting, setting_factory

QUANTIZATIONS = (None, "int8")
DTYPE_KEYS = ("torch_dtype", "dtype")  # the model_kwargs keys from_pretrained reads a dtype from
# The hub token, read from the environment where the model is loaded; never stored by value.
DEFAULT_TOKEN = Secret.from_env_var(["HF_API_TOKEN", "HF_TOKEN"], strict=False)


@dataclass(frozen=True)
class ModelSettings(Settings):
    """The question-answering model and how it is loaded."""

    model: str = setting("deepset/roberta-base-squad2-distilled", "hub id or local folder of a QA model")
    precision: str = setting("fp32", "fp32; bf16 (the model in bfloat16, spans decoded in fp32); auto: bf16 where fast")
    quantization: str | None = setting(None, '"int8": dynamic int8 on CPU (faster, answers may differ slightly)')
    model_kwargs: dict[str, Any] = setting_factory(dict, "passed to from_pretrained (torch_dtype, ...)")

    @property
    def trust_remote_code(self) -> bool:
        """Whether custom code shipped with the model may run (the user's `model_kwargs.trust_remote_code`)."""
        return bool(self.model_kwargs.get("trust_remote_code", False))

    def problems(self) -> list[str]:
        problems = []
        if self.quantization not in QUANTIZATIONS:
            problems.append(f"quantization must be one of {QUANTIZATIONS}, not {self.quantization!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        elif self.precision != "fp32" and self.quantization is not None:
            problems.append(f"precision {self.precision} and quantization {self.quantization} exclude each other")
        if not isinstance(self.model_kwargs, dict):
            problems.append(f"model_kwargs must be a mapping, not {type(self.model_kwargs).__name__}")
        else:
            if not isinstance(self.model_kwargs.get("trust_remote_code", False), bool):
                trust = self.model_kwargs["trust_remote_code"]
                problems.append(f"model_kwargs.trust_remote_code must be true or false, not {trust!r}")
            if self.precision != "fp32" and any(key in self.model_kwargs for key in DTYPE_KEYS):
                problems.append(f"precision {self.precision} and a dtype in model_kwargs exclude each other: give one")
        return problems


# Files of a model folder that do not change what the model computes: documentation, licences, and hidden
# files and folders (`.git/`, the `.cache/` that `huggingface-cli download --local-dir` leaves).
_NOT_MODEL_FILES = ("README*", "LICENSE*", "*.md")
_HASH_CHUNK = 1 << 20  # bytes read at a time


def model_fingerprint(settings: ModelSettings) -> dict[str, Any]:
    """
    What identifies the model's files, to recognise changed weights, configuration or tokenizer on resume. For a
    local folder: the size and the sha256 of each of its files (its configuration, tokenizer files, weights and
    any custom code; not its documentation or hidden files), streamed, so that a few hundred MB hash in about a
    second. For a hub id: the id and the `model_kwargs` revision (None: the hub's default branch); nothing is
    downloaded, so a change on the hub under the same revision goes unnoticed.

    :returns: `{"files": {relative path: {"size": bytes, "sha256": hex}}}` for a folder, or
        `{"hub": id, "revision": revision}`.
    """
    folder = Path(settings.model).expanduser()
    if not folder.is_dir():
        return {"hub": settings.model, "revision": settings.model_kwargs.get("revision")}
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if any(relative.match(pattern) for pattern in _NOT_MODEL_FILES):
            continue
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(_HASH_CHUNK):
                digest.update(chunk)
        files[relative.as_posix()] = {"size": path.stat().st_size, "sha256": digest.hexdigest()}
    return {"files": files}


def changed_model_files(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The files of two folder fingerprints that differ, were added or were removed (by relative path), sorted."""
    before, after = old.get("files", {}), new.get("files", {})
    return sorted(name for name in {*before, *after} if before.get(name) != after.get(name))


def show_model_library_output(verbose: bool) -> None:
    """
    Whether transformers prints its own output in this process: its warnings (the LOAD REPORT table of a model whose
    head is new) and its progress bars ("Loading weights", "Writing model shards"). Off unless `verbose`, so that a
    command prints only the project's own lines; each command's entry point sets it once (`--verbose`).
    """
    from transformers.utils import logging as transformers_logging

    if verbose:
        transformers_logging.set_verbosity_warning()
        transformers_logging.enable_progress_bar()
    else:
        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()


def resolve_token(token: Secret | None) -> str | None:
    """The token's value where it is used, or None."""
    return token.resolve_value() if token is not None else None


@lru_cache(maxsize=4)
def load_tokenizer(model: str, token: Secret | None = DEFAULT_TOKEN, trust_remote_code: bool = False) -> Any:
    """
    The model's (fast) tokenizer, loaded once per process and arguments.

    :param model: A local folder or a hub id.
    :param token: The hub token (its value is read here, from the environment of the process that loads).
    :param trust_remote_code: Whether custom tokenizer code may run.
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model, token=resolve_token(token), trust_remote_code=trust_remote_code)


def load_config(model: str, token: Secret | None = DEFAULT_TOKEN, trust_remote_code: bool = False) -> Any:
    """The model's transformers configuration."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model, token=resolve_token(token), trust_remote_code=trust_remote_code)
