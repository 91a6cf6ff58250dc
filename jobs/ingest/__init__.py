"""Folders of files into a documents table (`python -m jobs.ingest`): see `cli.py`."""

from jobs.ingest.cli import main

__all__ = ["main"]
