"""The generated reference pages (docs/reference/) hold what the code holds: every command and option, every column."""

import argparse
import re
from pathlib import Path
from types import ModuleType

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


def test_every_option_of_every_command_is_in_the_reference_with_its_default(generator: ModuleType) -> None:
    pages = command_pages(generator)
    options = 0
    for command, parser in generator.parsers().items():
        sections = re.split(r"^## `(\S+)`$", pages[command], flags=re.MULTILINE)  # the subcommands' sections
        texts = {"": sections[0], **dict(zip(sections[1::2], sections[2::2], strict=True))}
        for name, each in {"": parser, **generator.subcommands(parser)}.items():
            rows = {line.split(" | ")[0] for line in texts[name].splitlines() if line.startswith("| `")}
            for action in each._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                names = action.option_strings or [action.metavar or action.dest]
                row = next((row for row in rows if all(f"`{name}`" in row for name in names)), None)
                assert row is not None, f"python -m {command} {name}: {names} is not in docs/reference/commands/"
                options += 1
    # The bulk job alone has over a hundred options: a reference that lost its groups would show far fewer.
    assert options > 150


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


def test_column_descriptions_come_from_the_schema_comments(generator: ModuleType) -> None:
    source = (
        '[\n    ("rank", pa.int32()),  # 1-based position\n    ("answer", pa.string()),\n'
        '    ("x", pa.list_(pa.int32())),  # ids\n]'
    )
    assert generator.column_comments(source) == {"rank": "1-based position", "x": "ids"}


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
