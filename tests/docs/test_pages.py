"""What the pages say holds: they speak of the software, not of the people who make it; the lists they give match
the code; the tutorial's words match what its commands print (`test_commands.py` runs them and checks the output
the page shows)."""

import re
from pathlib import Path

from tests.docs.conftest import DOCS, ROOT

# Words of lab notes, not of a user's guide: who measured, on whose machine, in which session, by what process.
LAB_NOTES = re.compile(
    r"\b(sessions?|engineers?|colleagues?|lent|load averages?|shared (?:with|machine|\d+-core)|machines? shared"
    r"|lab notes?|(?:the|our) team|incoming|when the choice was made)\b",
    re.IGNORECASE,
)
PAGES = [*sorted(DOCS.rglob("*.md")), ROOT / "README.md", ROOT / "cluster" / "README.md"]


def test_the_pages_carry_no_lab_notes() -> None:
    found = [
        f"{page.relative_to(ROOT)}:{number}: {match.group(0)!r}"
        for page in PAGES
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in LAB_NOTES.finditer(line)
    ]
    assert not found, "\n".join(found)


def test_the_lab_notes_check_finds_them() -> None:
    notes = "on the machine shared with four other engineers (load average 10 to 13); no GPU was lent"
    assert [match.group(0) for match in LAB_NOTES.finditer(notes)] == [
        "machine shared", "engineers", "load average", "lent",
    ]  # fmt: skip
    assert not list(LAB_NOTES.finditer("AWS_SESSION_TOKEN, a shared mount, relentless"))


def test_no_folder_of_notes_waits_in_the_docs() -> None:
    assert not (DOCS / "incoming").exists()


def test_the_resuming_page_lists_exactly_the_settings_a_resumed_run_may_change() -> None:
    """`RunSettings` are the settings left out of a run's identity (`JobConfig.identity`): those a resumed run may
    change. The page's sentence names each, and nothing else."""
    from jobs.bulk_qa.config import RunSettings

    page = (DOCS / "how-to" / "resuming-and-failures.md").read_text(encoding="utf-8")
    sentence = re.search(r"Settings that only change where and how the job runs.*?\.(?:\s|$)", page, re.DOTALL)
    assert sentence, "the resuming page no longer lists the settings a resumed run may change"
    listed = re.findall(r"`([a-z_]+)`", sentence.group(0))
    assert sorted(listed) == sorted(RunSettings.types()), set(listed) ^ set(RunSettings.types())


def test_the_tutorial_says_what_its_summary_shows() -> None:
    """The tutorial shows its job's summary (checked against the run by test_commands.py), and its words on the
    statuses agree with the counts shown."""
    page = (DOCS / "tutorial.md").read_text(encoding="utf-8")
    shown = re.search(
        r"<!-- docs:output -->\n```text\n.*?questions\s+(\d+) in, (\d+) out: (\d+) answered, (\d+) refused, (\d+) "
        r"no_documents, (\d+) error\n.*?```",
        page,
        re.DOTALL,
    )
    assert shown, "the tutorial no longer shows its job's summary"
    total, out, answered, refused, no_documents, errors = map(int, shown.groups())
    assert total == out == answered + refused + no_documents + errors
    assert ("Every question is `answered`" in page) == (answered == total)
    assert "many are" not in page  # refused: the run shows how many are
