"""The documentation's tests: the generator of the reference pages, loaded from docs/ (a script, not a package)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="session")
def generator() -> ModuleType:
    """`docs/generate_reference.py` as a module."""
    spec = importlib.util.spec_from_file_location("generate_reference", DOCS / "generate_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
