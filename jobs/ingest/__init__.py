"""
Folders of files into a documents table (`python -m jobs.ingest`: see `cli.py`). Nothing is imported here: Ray's
conversion workers import `jobs.ingest.stage` alone, without the command line's imports (the bulk job's
configuration, and through it torch).
"""


def main(argv: list[str] | None = None) -> int:
    """`python -m jobs.ingest`'s entry point (`jobs.ingest.cli.main`); returns the exit status."""
    from jobs.ingest.cli import main as cli_main

    return cli_main(argv)


__all__ = ["main"]
