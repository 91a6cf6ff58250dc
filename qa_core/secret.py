"""A secret read from environment variables, serialised by the variables' names and never by its value."""

import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Secret:
    """
    A secret such as an API token.

    Usage example:
    ```python
    token = Secret.from_env_var(["HF_API_TOKEN", "HF_TOKEN"], strict=False)
    token.resolve_value()  # the first variable that is set, or None
    ```
    """

    env_vars: tuple[str, ...] = ()
    strict: bool = True
    _token: str | None = None

    @classmethod
    def from_env_var(cls, env_vars: str | list[str], strict: bool = True) -> "Secret":
        """A secret read from the first of `env_vars` that is set; `strict` raises when none is."""
        names = (env_vars,) if isinstance(env_vars, str) else tuple(env_vars)
        return cls(env_vars=names, strict=strict)

    @classmethod
    def from_token(cls, token: str) -> "Secret":
        """A secret given by value: usable, but it cannot be serialised."""
        return cls(_token=token)

    def resolve_value(self) -> str | None:
        """The secret's value, or `None` when no variable is set and the secret is not strict."""
        if self._token is not None:
            return self._token
        for name in self.env_vars:
            if os.environ.get(name):
                return os.environ[name]
        if self.strict:
            raise ValueError(f"None of the environment variables {', '.join(self.env_vars)} is set.")
        return None

    def to_dict(self) -> dict[str, Any]:
        """The names of the variables, never the value."""
        if self._token is not None:
            raise ValueError("A token given by value cannot be serialised: use Secret.from_env_var instead.")
        return {"type": "env_var", "env_vars": list(self.env_vars), "strict": self.strict}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Secret":
        """Rebuilds a secret from `to_dict()`'s form."""
        if data.get("type") != "env_var":
            raise ValueError(f"Unknown secret type {data.get('type')!r}: only 'env_var' secrets can be deserialised.")
        return cls.from_env_var(data["env_vars"], strict=data.get("strict", True))

    def __repr__(self) -> str:
        return f"Secret(env_vars={list(self.env_vars)}, strict={self.strict})" if self._token is None else "Secret(***)"
