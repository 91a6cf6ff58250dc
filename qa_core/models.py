"""
Which model answers, and the one place that loads its tokenizer and weights (with the hub token, wherever a hub
call can happen). transformers and torch load only when a function here is called.
"""

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from qa_core.secret import Secret
from qa_core.settings import Settings

QUANTIZATIONS = (None, "int8")
# The hub token, read from the environment where the model is loaded; never stored by value.
DEFAULT_TOKEN = Secret.from_env_var(["HF_API_TOKEN", "HF_TOKEN"], strict=False)


@dataclass(frozen=True)
class ModelSettings(Settings):
    """The question-answering model and how it is loaded."""

    model: str = "deepset/roberta-base-squad2-distilled"  # hub id or local folder of a QA model
    quantization: str | None = None  # "int8": dynamic int8 on CPU (faster, answers may differ slightly)
    model_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to from_pretrained (torch_dtype, ...)

    @property
    def trust_remote_code(self) -> bool:
        """Whether custom code shipped with the model may run (the user's `model_kwargs.trust_remote_code`)."""
        return bool(self.model_kwargs.get("trust_remote_code", False))

    def problems(self) -> list[str]:
        problems = []
        if self.quantization not in QUANTIZATIONS:
            problems.append(f"quantization must be one of {QUANTIZATIONS}, not {self.quantization!r}")
        if not isinstance(self.model_kwargs, dict):
            problems.append(f"model_kwargs must be a mapping, not {type(self.model_kwargs).__name__}")
        elif not isinstance(self.model_kwargs.get("trust_remote_code", False), bool):
            trust = self.model_kwargs["trust_remote_code"]
            problems.append(f"model_kwargs.trust_remote_code must be true or false, not {trust!r}")
        return problems


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
