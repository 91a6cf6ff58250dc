"""A local folder's listing: symbolic links out of it, link loops and names that are not UTF-8 (files generated)."""

import os
from pathlib import Path

import pytest

from qa_core.ingest import ReportRow, convert_files, convert_folder
from qa_core.ingest.limits import ConversionOptions
from qa_core.ingest.listing import ListedFile, list_folder_files
from qa_core.ingest.sources import ListingOpener

SECRET = "root-secret-hostname-4242"
NOT_FOLLOWED = (
    "symbolic link not followed (--follow-symlinks follows links to files and folders inside the input folder)"
)
OUTSIDE = "symbolic link to a target outside the input folder: not followed"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An input folder with a good file and a subfolder; a 'secret' file beside it (standing for /etc/hostname)."""
    (tmp_path / "secret").write_text(SECRET + "\n")
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    (root / "good.txt").write_text("A good file.\n")
    (root / "sub" / "inner.txt").write_text("Inside.\n")
    return root


def test_links_are_not_followed_by_default_each_a_report_row(folder: Path) -> None:
    os.symlink(folder.parent / "secret", folder / "hostname.txt")
    os.symlink(folder / "good.txt", folder / "alias.txt")
    os.symlink("..", folder / "sub" / "up")
    result = convert_folder(str(folder))
    assert [doc.id for doc in result.documents] == ["good.txt", "sub/inner.txt"]
    assert result.report == [
        ReportRow("alias.txt", None, NOT_FOLLOWED),
        ReportRow("hostname.txt", None, NOT_FOLLOWED),
        ReportRow("sub/up", None, NOT_FOLLOWED),
    ]
    assert all(SECRET not in doc.content for doc in result.documents)


def test_follow_symlinks_reads_inside_the_root_only(folder: Path) -> None:
    os.symlink(folder.parent / "secret", folder / "hostname.txt")
    os.symlink(folder.parent, folder / "parent")  # a folder out of the root
    os.symlink(folder / "good.txt", folder / "alias.txt")
    os.symlink(folder / "missing.txt", folder / "broken.txt")
    result = convert_folder(str(folder), options=ConversionOptions(follow_symlinks=True))
    assert [(doc.id, doc.content) for doc in result.documents] == [
        ("alias.txt", "A good file.\n"), ("good.txt", "A good file.\n"), ("sub/inner.txt", "Inside.\n")
    ]  # fmt: skip
    assert result.report == [
        ReportRow("broken.txt", None, "broken symbolic link: No such file or directory"),
        ReportRow("hostname.txt", None, OUTSIDE),
        ReportRow("parent", None, OUTSIDE),
    ]
    assert all(SECRET not in doc.content for doc in result.documents)


def test_link_loops_are_walked_once_and_reported(folder: Path) -> None:
    """A link to a parent would list the folder 40 times over (the kernel's limit); two such links 2^40 paths."""
    os.symlink("..", folder / "sub" / "up")
    os.symlink("..", folder / "sub" / "again")
    os.symlink(".", folder / "self")
    os.symlink("sub", folder / "second_way")
    listing = list_folder_files(folder, follow_symlinks=True)
    assert listing.paths == ["good.txt", "sub/inner.txt"]
    assert listing.report == [
        ReportRow("second_way", None, "symbolic link to a folder listed already as sub: not followed again"),
        ReportRow("self", None, "symbolic link loop: it points to ., a folder holding it; not followed"),
        ReportRow("sub/again", None, "symbolic link loop: it points to ., a folder holding it; not followed"),
        ReportRow("sub/up", None, "symbolic link loop: it points to ., a folder holding it; not followed"),
    ]


def test_a_name_that_is_not_utf8_is_listed_and_converted_under_an_escaped_id(folder: Path) -> None:
    name = b"caf\xe9.txt"
    (folder / "sub" / os.fsdecode(name)).write_bytes(b"Latin-1 named.\n")
    listing = list_folder_files(folder)

    def mtime(*parts: str) -> int:
        return os.stat(folder.joinpath(*parts)).st_mtime_ns

    assert listing.files == [  # each file with its size and modification time, as the folder holds them
        ListedFile("good.txt", b"good.txt", 13, mtime("good.txt")),
        ListedFile("sub/caf\\xe9.txt", b"sub/caf\xe9.txt", 15, mtime("sub", os.fsdecode(name))),
        ListedFile("sub/inner.txt", b"sub/inner.txt", 8, mtime("sub", "inner.txt")),
    ]
    result = convert_folder(str(folder))
    assert [(doc.id, doc.content) for doc in result.documents] == [
        ("good.txt", "A good file.\n"), ("sub/caf\\xe9.txt", "Latin-1 named.\n"), ("sub/inner.txt", "Inside.\n")
    ]  # fmt: skip
    assert result.report == []


def test_a_fifo_is_reported_not_opened(folder: Path) -> None:
    """Opening a FIFO for reading would wait for a writer forever."""
    os.mkfifo(folder / "pipe.txt")
    result = convert_folder(str(folder))
    assert [doc.id for doc in result.documents] == ["good.txt", "sub/inner.txt"]
    assert result.report == [ReportRow("pipe.txt", None, "not a regular file (a FIFO, socket or device): not read")]


def test_a_file_made_a_link_out_after_the_listing_is_not_read(folder: Path) -> None:
    """Between the listing and the reading: a file swapped for a link (not followed), a link retargeted out."""
    os.symlink(folder / "good.txt", folder / "alias.txt")
    plain, following = list_folder_files(folder), list_folder_files(folder, follow_symlinks=True)
    for name in ("good.txt", "alias.txt"):
        os.remove(folder / name)
        os.symlink(folder.parent / "secret", folder / name)
    result = convert_files(str(folder), ["good.txt"], open_input=ListingOpener.of(folder, plain.files))
    assert result.report == [ReportRow("good.txt", None, "cannot read the file: Too many levels of symbolic links")]
    options = ConversionOptions(follow_symlinks=True)
    opener = ListingOpener.of(folder, following.files, follow_symlinks=True)
    result = convert_files(str(folder), ["alias.txt"], options=options, open_input=opener)
    reason = "symbolic link to a target outside the input folder: not read"
    assert (result.documents, result.report) == ([], [ReportRow("alias.txt", None, reason)])
