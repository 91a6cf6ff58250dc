"""Fixtures for the ingestion tests: an offline NLTK data folder for Haystack's sentence splitter."""

import pytest


@pytest.fixture(scope="session")
def empty_punkt_model(tmp_path_factory):
    """
    An NLTK data folder holding an English `punkt_tab` model with empty parameters, so that Haystack's
    `SentenceSplitter` runs offline (it would download the trained model) with what `qa_core.ingest.sentences` uses:
    Punkt's rules plus Haystack's curated abbreviations. Set as `NLTK_DATA` and on `nltk.data.path`.
    """
    import nltk

    root = tmp_path_factory.mktemp("nltk_data")
    model = root / "tokenizers" / "punkt_tab" / "english"
    model.mkdir(parents=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (model / name).write_text("")
    nltk.data.path.insert(0, str(root))
    yield root
    nltk.data.path.remove(str(root))
