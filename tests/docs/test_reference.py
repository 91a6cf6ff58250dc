"""The generated reference pages (docs/reference/) hold what the code holds: every command and option, every column."""

import argparse
import dataclasses
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from jobs.bulk_qa.config import JobConfig
from jobs.options import add_options, with_values
from jobs.train.cli import recipe
from qa_core.settings import Settings, setting
from tests.docs.conftest import DOCS, ROOT


def test_the_committed_reference_is_what_the_code_generates(generator: ModuleType) -> None:
    stale = generator.stale_pages()
    assert not stale, f"docs/reference/ {stale} differ from the code: run {generator.REGENERATE} and commit them"


def entry_points() -> set[str]:
    """Every module of jobs/ and qa_core/ that runs as `python -m`: a package's __main__.py, or a __main__ guard."""
    found = set()
    for path in [*sorted((ROOT / "jobs").rglob("*.py")), *sorted((ROOT / "qa_core").rglob("*.py"))]:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if path.name == "__main__.py":
            found.add(module.removesuffix(".__main__"))
        elif 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            found.add(module)
    return found


def test_every_command_is_documented_or_left_out_for_a_stated_reason(generator: ModuleType) -> None:
    commands = entry_points()
    assert {"jobs.bulk_qa", "jobs.ingest", "qa_core.local_models"} <= commands
    missing = sorted(commands - set(generator.COMMANDS) - set(generator.NOT_DOCUMENTED))
    assert not missing, f"add these commands to COMMANDS (or NOT_DOCUMENTED) in docs/generate_reference.py: {missing}"
    gone = sorted((set(generator.COMMANDS) | set(generator.NOT_DOCUMENTED)) - commands)
    assert not gone, f"docs/generate_reference.py names commands that no longer exist: {gone}"


def command_pages(generator: ModuleType) -> dict[str, str]:
    """The committed reference page of each command, by command."""
    reference = DOCS / "reference"
    return {
        command: (reference / generator.command_page_name(command)).read_text(encoding="utf-8")
        for command in generator.COMMANDS
    }


def options(
    generator: ModuleType, parsers: dict[str, argparse.ArgumentParser]
) -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    """Every option of the commands' parsers: `(command with its subcommand, the parser, the option's action)`."""
    for command, parser in parsers.items():
        for name, each in {"": parser, **generator.subcommands(parser)}.items():
            for action in each._actions:
                if not isinstance(action, argparse._HelpAction):
                    yield f"{command} {name}".strip(), each, action


def option_rows(generator: ModuleType) -> dict[tuple[str, str], list[str]]:
    """The committed reference's row of each option, its cells, by `(command with subcommand, option's dest)`."""
    rows = {}
    for command, page in command_pages(generator).items():
        sections = re.split(r"^## `(\S+)`$", page, flags=re.MULTILINE)  # the subcommands' sections
        texts = {"": sections[0], **dict(zip(sections[1::2], sections[2::2], strict=True))}
        for name, text in texts.items():
            for line in text.splitlines():
                if line.startswith("| `"):
                    rows[(f"{command} {name}".strip(), line.split(" | ")[0])] = line.split(" | ")
    return rows


def row_of(rows: dict[tuple[str, str], list[str]], command: str, action: argparse.Action) -> list[str] | None:
    names = action.option_strings or [action.metavar or action.dest]
    return next(
        (cells for (at, first), cells in rows.items() if at == command and all(f"`{n}`" in first for n in names)),
        None,
    )


def test_every_option_of_every_command_is_in_the_reference_with_its_default(generator: ModuleType) -> None:
    rows = option_rows(generator)
    found = 0
    for command, _, action in options(generator, generator.parsers()):
        names = action.option_strings or [action.metavar or action.dest]
        assert row_of(rows, command, action) is not None, f"python -m {command}: {names} is not in the reference"
        found += 1
    # The bulk job alone has over a hundred options: a reference that lost its groups would show far fewer.
    assert found > 150


def missing_descriptions(generator: ModuleType, parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """A line per option without a description, naming the option and where to declare its help."""
    missing = []
    for command, _, action in options(generator, parsers):
        if generator.description(action).strip():
            continue
        if hasattr(action, "settings_class"):  # a field of a settings class (jobs.options)
            declared = action.settings_class
            where = f"{declared.__qualname__} in {Path(inspect.getfile(declared)).relative_to(ROOT)}"
            fix = f'declare the field as `{action.dest}: ... = setting(default, "help")` (qa_core.settings)'
        else:
            where = f"the add_argument in {generator.COMMANDS.get(command.split()[0], command).split(':')[0]}"
            fix = "give it help="
        option = f"python -m {command} {'/'.join(action.option_strings) or action.dest}"
        missing.append(f"{option} has no description: {fix}, in {where}")
    return missing


def test_every_option_of_every_command_has_a_description(generator: ModuleType) -> None:
    missing = missing_descriptions(generator, generator.parsers())
    assert not missing, "\n".join(missing)


@dataclasses.dataclass(frozen=True)
class _Commented(Settings):
    """Settings of which one field has its help in a comment only."""

    documented: int = setting(1, "declared help")
    commented: int = 2  # a comment is no help


def test_an_option_whose_field_declares_no_help_is_named_with_its_class_and_file(generator: ModuleType) -> None:
    parser = argparse.ArgumentParser(prog="python -m jobs.example")
    add_options(parser, {"example": _Commented()})
    parser.add_argument("--plain", type=int)
    parser.add_argument("--explained", type=int, help="what it sets")
    missing = missing_descriptions(generator, {"jobs.example": parser})
    assert missing == [
        "python -m jobs.example --commented has no description: declare the field as "
        '`commented: ... = setting(default, "help")` (qa_core.settings), in _Commented in tests/docs/test_reference.py',
        "python -m jobs.example --plain has no description: give it help=, in the add_argument in jobs.example",
    ]


def test_every_command_is_listed_on_the_commands_page(generator: ModuleType) -> None:
    index = (DOCS / "reference" / "commands.md").read_text(encoding="utf-8")
    for command in generator.COMMANDS:
        assert f"[`python -m {command}`]({generator.command_page_name(command)})" in index


def test_a_settings_flag_shows_its_settings_default(generator: ModuleType) -> None:
    """`--top-k`'s row gives the reader's default (20 in the job), not argparse's suppressed default."""
    from jobs.bulk_qa.config import JobConfig

    page = command_pages(generator)["jobs.bulk_qa"]
    row = next(line for line in page.splitlines() if line.startswith("| `--top-k`"))
    assert row.split(" | ")[1] == f"`{JobConfig().phases()['selection'].top_k}`"
    assert "(default:" not in row


def test_every_column_of_every_output_table_is_in_the_reference(generator: ModuleType) -> None:
    page = (DOCS / "reference" / "tables.md").read_text(encoding="utf-8")
    for table in generator.TABLES:
        schema = generator._load(f"{generator.SCHEMA_MODULES[table.schema]}:{table.schema}")
        section = page.split(f"## {table.name}\n", 1)[1].split("\n## ", 1)[0]
        for field in schema:
            assert f"| `{field.name}` | `{field.type}` |" in section, f"{table.name}.{field.name}"


def test_every_column_of_every_output_table_has_a_description(generator: ModuleType) -> None:
    page = (DOCS / "reference" / "tables.md").read_text(encoding="utf-8")
    missing, shown = [], 0
    for table in generator.TABLES:
        section = page.split(f"## {table.name}\n", 1)[1].split("\n## ", 1)[0]
        for name, kind, description in generator.table_columns(table):
            if not description.strip():
                module = generator.SCHEMA_MODULES[table.schema]
                missing.append(f"{table.name}.{name}: describe it in {module}'s described_schema of {table.schema}")
            shown += f"| `{name}` | `{kind}` | {generator._cell(description)} |" in section
    assert not missing, "\n".join(missing)
    assert shown == sum(len(generator.table_columns(table)) for table in generator.TABLES)


# What a command's settings hold, from the values its parser gave, where the command builds them otherwise than from
# its settings classes' own defaults.
COMMAND_SETTINGS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "jobs.bulk_qa": lambda values: JobConfig.from_values(values).to_dict(),
    "jobs.train": lambda values: recipe(argparse.Namespace(**values)).as_dict(),
}


def parsed_without_arguments(parser: argparse.ArgumentParser) -> tuple[dict[str, Any], set[str]]:
    """What the parser gives for no arguments, with its required options waived, and those options' dests."""
    required = {action.dest for action in parser._actions if action.required}
    for action in parser._actions:
        action.required = False
    return vars(parser.parse_args([])), required


def expected_default(
    generator: ModuleType, command: str, action: argparse.Action, values: dict[str, Any], required: set[str]
) -> str:
    """The default an option's row must show, from what its parser gave for no arguments (`values`)."""
    if hasattr(action, "settings_class"):  # absent from `values`: the settings keep their value
        settings = COMMAND_SETTINGS.get(command.split()[0])
        given = settings(values) if settings else with_values({"": action.settings_class()}, values)[""].as_dict()
        return generator._code(given[action.dest])
    if action.dest in required:
        return "required"
    value = values.get(action.dest)
    if generator.is_flag(action):
        return "on" if value == action.const else "off"  # a flag's row says what happens without it
    return "" if value is None else generator._code(value)


def test_every_default_shown_is_what_the_parser_gives_for_no_arguments(generator: ModuleType) -> None:
    rows, parsed, wrong, compared = option_rows(generator), {}, [], 0
    for command, parser, action in options(generator, generator.parsers()):
        if isinstance(action, argparse._SubParsersAction):
            continue
        if parser not in parsed:
            parsed[parser] = parsed_without_arguments(parser)
        shown = row_of(rows, command, action)[1]
        expected = generator._cell(expected_default(generator, command, action, *parsed[parser]))
        compared += 1
        if shown != expected:
            option = "/".join(action.option_strings) or action.dest
            wrong.append(f"python -m {command} {option}: the reference shows {shown}, the parser gives {expected}")
    assert not wrong, "\n".join(wrong)
    assert compared > 150


def test_the_generated_pages_say_how_to_regenerate_them(generator: ModuleType) -> None:
    for name in generator.pages():
        first = Path(DOCS / "reference" / name).read_text(encoding="utf-8").splitlines()[0]
        assert first == generator.GENERATED_NOTE


def test_a_command_with_subcommands_gets_a_section_per_subcommand(generator: ModuleType) -> None:
    parser = argparse.ArgumentParser(prog="python -m jobs.example", description="An example.")
    commands = parser.add_subparsers(dest="action", help="what to do")
    push = commands.add_parser("push", description="Send the tasks.")
    push.add_argument("--project", required=True, help="the project's id")
    commands.add_parser("pull", description="Fetch the reviews.").add_argument("--to", default="out", help="where")
    page = generator.command_page("jobs.example", parser)
    assert "\n## `push`\n\nSend the tasks.\n\n### Options\n" in page
    assert "| `--project` `PROJECT` | required | the project's id |" in page
    assert "\n## `pull`\n" in page and "| `--to` `TO` | `out` | where |" in page
