"""
The base of every component's settings: a dataclass whose fields declare their documentation (`setting(default,
help)`) and whose `problems()` are its validation. Each phase defines its settings next to the code that uses them
(`TokenizationSettings` in `tokenization.py`, `InferenceSettings` in `inference.py`, `SelectionSettings` in
`selection.py`, `ModelSettings` in `models.py`); the components, the Ray job's configuration and command line,
and the benchmark all derive from those definitions.
"""

import dataclasses
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

HELP = "help"  # the key of a field's metadata that holds its documentation


def setting(default: Any, help: str) -> Any:
    """
    A settings field with its default and its documentation (the `--help` of its flag and its row in the
    reference), e.g. `top_k: int = setting(20, "answers per question")`. Use `setting_factory` for a mutable default.
    """
    return dataclasses.field(default=default, metadata={HELP: help})


def setting_factory(factory: Callable[[], Any], help: str) -> Any:
    """A settings field whose default is made by `factory` (`list`, `dict`), with its documentation."""
    return dataclasses.field(default_factory=factory, metadata={HELP: help})


class Settings:
    """
    Mixin for settings dataclasses: `problems()` lists what is wrong with the values (empty when they are usable),
    `check()` raises them all at once, `docs()` gives each field's documentation.
    """

    def problems(self) -> list[str]:
        """What is wrong with the values, one message per problem naming the parameter; empty when usable."""
        return []

    def check(self) -> None:
        """
        :raises ValueError: Listing every problem of `problems()`.
        """
        problems = self.problems()
        if problems:
            raise ValueError(f"Invalid {type(self).__name__}: " + "; ".join(problems) + ".")

    def as_dict(self) -> dict[str, Any]:
        """The fields and their values (containers copied)."""
        return {spec.name: _copy(getattr(self, spec.name)) for spec in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def docs(cls) -> dict[str, str]:
        """Each field's documentation (declared with `setting`; empty for a field declared otherwise), by name."""
        return {spec.name: spec.metadata.get(HELP, "") for spec in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def types(cls) -> dict[str, Any]:
        """Each field's annotation, resolved (also in modules with postponed annotations)."""
        return _field_types(cls)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field's default value."""
        return cls().as_dict()  # type: ignore[call-arg]


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value


@cache
def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {spec.name: hints[spec.name] for spec in dataclasses.fields(cls)}


def at_least(name: str, value: Any, minimum: float, optional: bool = False) -> list[str]:
    """`[f"{name} must be >= {minimum}, not {value}"]` when `value` is below `minimum` (None passes if optional)."""
    if value is None and optional:
        return []
    return [] if value is not None and value >= minimum else [f"{name} must be >= {minimum}, not {value}"]


def within(name: str, value: float | None, low: float, high: float) -> list[str]:
    """A problem when a set `value` lies outside `[low, high]`; `None` passes."""
    return [] if value is None or low <= value <= high else [f"{name} must be within [{low}, {high}], not {value}"]
