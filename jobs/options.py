"""
Command-line options derived from settings classes (`qa_core.settings.Settings`): one flag per field, documented
by the help its field declares (`qa_core.settings.setting`), and the values given turned back into settings. The
bulk job's configuration (`jobs.bulk_qa.config`) and the other entry points (`jobs.ingest`, `jobs.index`,
`jobs.train`, the benchmark) build their flags here, so that an option is defined once, in its settings class.
Light on purpose: it imports no component.
"""

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

import yaml

from qa_core.settings import Settings


def base_type(annotation: Any) -> type:
    """`int | None` -> int, `dict[str, Any] | None` -> dict."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    return typing.get_origin(annotation) or annotation


def is_optional(annotation: Any) -> bool:
    """`int | None` -> True."""
    return type(None) in typing.get_args(annotation)


def _none_or(kind: type) -> Callable[[str], Any]:
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


def add_options(
    parser: argparse.ArgumentParser, phases: dict[str, Settings], only: frozenset[str] | None = None
) -> None:
    """
    One flag per field of each phase's settings (dashes for underscores), in a group per phase, documented by the
    field's declared help and showing the given settings' value as the default. Flags not given are absent from the
    parsed namespace, so that they keep their default.

    :param only: The fields to offer (default: all of them).
    """
    for phase in phases.values():
        group = parser.add_argument_group(type(phase).__doc__.splitlines()[0].rstrip("."))
        docs, values = phase.docs(), phase.as_dict()
        for name, annotation in phase.types().items():
            if only is not None and name not in only:
                continue
            flag = "--" + name.replace("_", "-")
            kind = base_type(annotation)
            help_text = f"{docs.get(name, '')} (default: {values[name]})"
            options: dict[str, Any] = {"help": help_text, "default": argparse.SUPPRESS}
            if kind is bool:
                action = group.add_argument(flag, action=_BooleanFlag, **options)
            elif kind in (dict, list):
                action = group.add_argument(flag, type=_yaml_value, metavar="YAML", **options)
            else:
                parse = _none_or(kind) if is_optional(annotation) else kind
                action = group.add_argument(flag, type=parse, metavar=kind.__name__.upper(), **options)
            action.settings_default = values[name]  # the value a flag not given keeps (the generated reference's)
            action.settings_class = type(phase)  # where the option is declared (named by the reference's tests)


def with_values(phases: dict[str, Settings], values: dict[str, Any]) -> dict[str, Settings]:
    """Each phase's settings with the options of `values` that are its fields replaced."""
    return {
        name: dataclasses.replace(phase, **{key: values[key] for key in phase.types() if key in values})
        for name, phase in phases.items()
    }


__all__ = ["add_options", "base_type", "is_optional", "with_values"]
