"""
CrossEncoderRanker: Haystack's `SentenceTransformersSimilarityRanker` (a cross-encoder scores each (query, document)
pair; documents come back best first), ranking many queries' documents in shared, length-sorted forward passes.

The model is a sentence-transformers `CrossEncoder` folder (a sequence-classification model with one label, its
tokenizer, and optionally `modules.json` with one Transformer module), run on transformers directly, as
`qa_core.embedding` runs embedding models: the pairs are tokenized as `CrossEncoder.predict` tokenizes them
(`longest_first` truncation at the folder's maximum length) and the model sees the same ids, token types and mask,
so the scores equal Haystack's within 1e-5 (tests/qa_core/test_ranker.py). What differs is the batching: every
query's pairs together, sorted by length and cut by a token budget (`qa_core.inference.length_sorted_batches`),
where `CrossEncoder.rank` runs each query's pairs alone, 16 at a time; the encoder's last layer computed for the
first token alone, the only one the classifier reads (`FirstTokenLayer`, for BERT-like models); and
sentence-transformers stays out of the run-time dependencies.
"""

import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qa_core.document import Document
from qa_core.embedding import MODULES_FILE, TRANSFORMER_CONFIG_FILE, read_model_json, resolve_model_folder
from qa_core.hardware import PRECISION_DTYPES, resolve_precision
from qa_core.inference import default_batch_tokens, length_sorted_batches, model_dtype, pad_rows, resolve_device
from qa_core.retrieval.scored_document import ScoredDocument
from qa_core.settings import Settings, at_least, setting, setting_factory

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "cross-encoder/ms-marco-MiniLM-L-6-v2"  # Haystack's default ranking model


@dataclass(frozen=True)
class RankerSettings(Settings):
    """How the cross-encoder ranker prepares, scores and keeps each query's documents."""

    top_k: int = setting(10, "documents kept per query, best first")
    scale_score: bool = setting(True, "scores as sigmoid(calibration_factor * logit); false: the model's raw logits")
    calibration_factor: float = setting(1.0, "multiplies the logit before the sigmoid (with scale_score)")
    score_threshold: float | None = setting(None, "keep only documents scoring at least this (after scaling)")
    meta_fields_to_embed: list[str] = setting_factory(list, "meta values put before a document's content")
    embedding_separator: str = setting("\n", "joins the embedded meta values and the content")
    query_prefix: str = setting("", "put before each query (an instruction some models expect)")
    query_suffix: str = setting("", "put after each query")
    document_prefix: str = setting("", "put before each document's text")
    document_suffix: str = setting("", "put after each document's text")
    batch_size: int | None = setting(None, "most pairs per forward pass (None: only the token budget bounds it)")
    max_batch_tokens: int | None = setting(None, "most padded tokens per forward pass (None: by device and dtype)")

    def problems(self) -> list[str]:
        problems = at_least("top_k", self.top_k, 1)
        if not self.calibration_factor > 0:
            problems.append(f"calibration_factor must be > 0, not {self.calibration_factor}")
        if not isinstance(self.meta_fields_to_embed, list):
            problems.append(f"meta_fields_to_embed must be a list, not {type(self.meta_fields_to_embed).__name__}")
        problems += at_least("batch_size", self.batch_size, 1, optional=True)
        return problems + at_least("max_batch_tokens", self.max_batch_tokens, 1, optional=True)

    def query_text(self, query: str) -> str:
        """The query as the model reads it: `query_prefix + query + query_suffix`."""
        return self.query_prefix + query + self.query_suffix

    def document_text(self, document: Document) -> str:
        """
        The document as the model reads it, as Haystack prepares it: the prefix, then the set values of
        `meta_fields_to_embed` and the content (empty when None) joined by `embedding_separator`, then the suffix.
        """
        meta = [str(document.meta[key]) for key in self.meta_fields_to_embed if document.meta.get(key) is not None]
        text = self.embedding_separator.join([*meta, document.content or ""])
        return self.document_prefix + text + self.document_suffix


_DEFAULTS = RankerSettings()


@dataclass(frozen=True)
class CrossEncoderConfig:
    """
    What a cross-encoder folder says of how to read a pair.

    :param folder: The model folder.
    :param max_length: Tokens a pair is truncated to (longest member first).
    :param do_lower_case: Whether texts are lower-cased first.
    """

    folder: Path
    max_length: int
    do_lower_case: bool

    @classmethod
    def read(
        cls, folder: str | Path, tokenizer_max_length: int, max_position_embeddings: int | None
    ) -> "CrossEncoderConfig":
        """
        The maximum length and lower-casing as `CrossEncoder` resolves them: `sentence_bert_config.json`'s
        `max_seq_length` where `modules.json` points at one that sets it, else the tokenizer's `model_max_length`
        capped at the model's `max_position_embeddings`.

        :raises ValueError: For a `modules.json` that holds anything but one Transformer module.
        """
        folder = Path(folder)
        settings: dict[str, Any] = {}
        if (folder / MODULES_FILE).is_file():
            modules = read_model_json(folder / MODULES_FILE, "the sentence-transformers module list")
            types = [module.get("type", "") for module in modules]
            if len(modules) != 1 or not types[0].endswith("Transformer"):
                raise ValueError(
                    f"{folder / MODULES_FILE}: a cross-encoder of one Transformer module is supported, not {types}"
                )
            config_file = folder / modules[0].get("path", "") / TRANSFORMER_CONFIG_FILE
            if config_file.is_file():
                settings = read_model_json(config_file, "the transformer settings")
        max_length = settings.get("max_seq_length")
        if max_length is None:
            max_length = tokenizer_max_length
            if max_position_embeddings is not None and max_position_embeddings != -1:
                max_length = min(max_length, max_position_embeddings)
        return cls(folder=folder, max_length=int(max_length), do_lower_case=bool(settings.get("do_lower_case", False)))


class CrossEncoderRanker:
    """
    Ranks documents by a cross-encoder's score of (query, document), with the semantics of Haystack's
    `SentenceTransformersSimilarityRanker`: documents deduplicated by id (the highest-scoring copy kept, in order of
    first appearance), each scored as `sigmoid(calibration_factor * logit)` (or the raw logit), sorted best first
    (ties in input order), those below `score_threshold` dropped, `top_k` kept.

    `run_batch` ranks many queries' documents at once: all their pairs share length-sorted forward passes, and each
    query's result equals `run` for it alone.

    Usage example:
    ```python
    from qa_core import Document
    from qa_core.ranker import CrossEncoderRanker

    ranker = CrossEncoderRanker(model="path/to/cross-encoder", top_k=2)
    ranker.warm_up()
    docs = [Document(content="Paris"), Document(content="Berlin"), Document(content="Rome")]
    ranked = ranker.run(query="City in Germany", documents=docs)["documents"]  # ScoredDocument, best first
    ```

    Differences from Haystack: `calibration_factor` (as Haystack's earlier `TransformersSimilarityRanker`; at its
    default 1.0 the scores are Haystack's); batches by a token budget across queries rather than 16 pairs of one
    query; `precision` bf16 runs the model in bfloat16 (scores then differ slightly); no ONNX or OpenVINO backend.
    """

    def __init__(
        self,
        model: str | Path = DEFAULT_MODEL,
        device: str | torch.device | None = None,
        top_k: int = _DEFAULTS.top_k,
        scale_score: bool = _DEFAULTS.scale_score,
        calibration_factor: float = _DEFAULTS.calibration_factor,
        score_threshold: float | None = _DEFAULTS.score_threshold,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = _DEFAULTS.embedding_separator,
        query_prefix: str = _DEFAULTS.query_prefix,
        query_suffix: str = _DEFAULTS.query_suffix,
        document_prefix: str = _DEFAULTS.document_prefix,
        document_suffix: str = _DEFAULTS.document_suffix,
        batch_size: int | None = _DEFAULTS.batch_size,
        max_batch_tokens: int | None = _DEFAULTS.max_batch_tokens,
        precision: str = "fp32",
    ) -> None:
        """
        Creates the ranker; `warm_up()` loads the model.

        :param model: A cross-encoder: a local folder of a sentence-transformers `CrossEncoder`, or a hub id.
        :param device: Where to run the model (`"cpu"`, `"cuda:1"`, ...); `None` picks CUDA when present, else CPU.
        :param top_k: Documents kept per query.
        :param scale_score: Scores as `sigmoid(calibration_factor * logit)`; `False`: the raw logits.
        :param calibration_factor: Multiplies the logit before the sigmoid (with `scale_score`).
        :param score_threshold: Keep only documents scoring at least this.
        :param meta_fields_to_embed: Meta fields whose values are put before a document's content.
        :param embedding_separator: Joins those values and the content.
        :param query_prefix: Put before each query.
        :param query_suffix: Put after each query.
        :param document_prefix: Put before each document's text.
        :param document_suffix: Put after each document's text.
        :param batch_size: Most pairs per forward pass; `None`: as many as `max_batch_tokens` allows.
        :param max_batch_tokens: Most padded tokens per forward pass; `None`: the reader's default for the device and
            the model's dtype (`qa_core.inference.default_batch_tokens`).
        :param precision: `fp32`, `bf16` (the model in bfloat16, scores in fp32) or `auto` (bf16 where fast).
        :raises ValueError: Naming every parameter whose value is unusable.
        """
        self.model = str(model)
        self.device = device
        self.top_k = top_k
        self.scale_score = scale_score
        self.calibration_factor = calibration_factor
        self.score_threshold = score_threshold
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])
        self.embedding_separator = embedding_separator
        self.query_prefix = query_prefix
        self.query_suffix = query_suffix
        self.document_prefix = document_prefix
        self.document_suffix = document_suffix
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.precision = precision
        self.config: CrossEncoderConfig | None = None
        self._model: torch.nn.Module | None = None
        self._tokenizer: Any = None
        self._device: torch.device | None = None
        problems = self._settings().problems()
        try:
            resolve_precision(precision, "cpu")
        except ValueError as error:
            problems.append(str(error))
        if problems:
            raise ValueError("Invalid CrossEncoderRanker parameters: " + "; ".join(problems) + ".")

    @classmethod
    def from_settings(cls, model: str | Path, settings: RankerSettings, **kwargs: Any) -> "CrossEncoderRanker":
        """A ranker of `model` with `settings`; `kwargs`: `device` and `precision`."""
        return cls(model=model, **settings.as_dict(), **kwargs)

    def warm_up(self) -> None:
        """Loads the tokenizer and the model onto the device. Calling it again does nothing.

        :raises ValueError: If the model has more than one label or its folder's layout is not supported.
        """
        if self._model is not None:
            return
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = resolve_model_folder(self.model)
        self._device = resolve_device(self.device)
        dtype = PRECISION_DTYPES[resolve_precision(self.precision, self._device)]
        model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=dtype)
        if model.config.num_labels != 1:
            raise ValueError(f"{self.model}: a ranking cross-encoder has 1 label, not {model.config.num_labels}.")
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        positions = getattr(model.config, "max_position_embeddings", None)
        self.config = CrossEncoderConfig.read(folder, self._tokenizer.model_max_length, positions)
        self._model = first_token_last_layer(model).to(self._device).eval()

    def _settings(self, **overrides: Any) -> RankerSettings:
        """The constructor's settings with the run-time overrides that are not `None`."""
        values = {name: getattr(self, name) for name in RankerSettings.types()}
        values.update({name: value for name, value in overrides.items() if value is not None})
        return RankerSettings(**values)

    def run(
        self,
        query: str,
        documents: list[Document],
        top_k: int | None = None,
        scale_score: bool | None = None,
        calibration_factor: float | None = None,
        score_threshold: float | None = None,
    ) -> dict[str, list[ScoredDocument]]:
        """
        Ranks one query's documents.

        Run-time parameters override the constructor's for this call; `None` keeps the constructor's value.

        :param query: The query.
        :param documents: The documents to rank (deduplicated by id first).
        :returns: `{"documents": [ScoredDocument, ...]}`, best first, each with its ranker score.
        :raises RuntimeError: If `warm_up()` was not called.
        :raises ValueError: For an unusable override (`top_k=0`, ...).
        """
        result = self.run_batch(
            [query],
            [documents],
            top_k=top_k,
            scale_score=scale_score,
            calibration_factor=calibration_factor,
            score_threshold=score_threshold,
        )
        return {"documents": result["documents"][0]}

    def run_batch(
        self,
        queries: list[str],
        documents: list[list[Document]],
        top_k: int | None = None,
        scale_score: bool | None = None,
        calibration_factor: float | None = None,
        score_threshold: float | None = None,
    ) -> dict[str, list[list[ScoredDocument]]]:
        """
        Ranks many queries' documents, all their pairs in shared forward passes; `run_batch(qs, ds)["documents"][i]`
        equals `run(qs[i], ds[i])["documents"]`.

        :param queries: The queries.
        :param documents: One list of documents per query.
        :returns: `{"documents": [[ScoredDocument, ...], ...]}`, one list per query, best first.
        :raises RuntimeError: If `warm_up()` was not called.
        :raises ValueError: If `queries` and `documents` differ in length, or for an unusable override.
        """
        if self._model is None:
            raise RuntimeError("The ranker is not warmed up: call warm_up() before run() or run_batch().")
        if len(queries) != len(documents):
            raise ValueError(f"Got {len(queries)} queries but {len(documents)} document lists.")
        settings = self._settings(
            top_k=top_k, scale_score=scale_score, calibration_factor=calibration_factor, score_threshold=score_threshold
        )
        problems = settings.problems()
        if problems:
            raise ValueError("Invalid run-time parameters: " + "; ".join(problems) + ".")
        unique = [deduplicate(docs) for docs in documents]
        pairs = [(settings.query_text(query), settings.document_text(doc))
                 for query, docs in zip(queries, unique, strict=True) for doc in docs]  # fmt: skip
        scores = scale(self.logits(pairs, settings), settings)
        ranked, start = [], 0
        for docs in unique:
            query_scores = scores[start : start + len(docs)]
            start += len(docs)
            ranked.append(select(docs, query_scores, settings))
        return {"documents": ranked}

    def logits(self, pairs: list[tuple[str, str]], settings: RankerSettings | None = None) -> np.ndarray:
        """
        The model's logit for each (query text, document text) pair, as read (no prefix added here).

        :param pairs: The pairs.
        :param settings: The batch bounds (`batch_size`, `max_batch_tokens`); `None`: the constructor's.
        :returns: `(pairs,)` float32 logits, in input order.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        if self._model is None or self.config is None:
            raise RuntimeError("The ranker is not warmed up: call warm_up() before logits().")
        settings = settings or self._settings()
        logits = np.zeros(len(pairs), np.float32)
        if not pairs:
            return logits
        queries, texts = [query for query, _ in pairs], [text for _, text in pairs]
        if self.config.do_lower_case:
            queries, texts = [query.lower() for query in queries], [text.lower() for text in texts]
        encoded = self._tokenizer(
            queries, texts, truncation="longest_first", max_length=self.config.max_length, return_attention_mask=False
        )
        input_ids = encoded["input_ids"]
        token_types = encoded.get("token_type_ids")
        budget = settings.max_batch_tokens or default_batch_tokens(self._device, model_dtype(self._model))
        for batch in length_sorted_batches(input_ids, budget, settings.batch_size):
            rows = [input_ids[index] for index in batch]
            types = None if token_types is None else [token_types[index] for index in batch]
            logits[batch] = self._forward(rows, types)
        return logits

    @torch.inference_mode()
    def _forward(self, rows: list[list[int]], token_types: list[list[int]] | None) -> np.ndarray:
        """One forward pass over token id rows (and their token types) -> `(rows,)` float32 logits."""
        input_ids, mask = pad_rows(rows, self._tokenizer.pad_token_id)
        inputs = {"input_ids": input_ids, "attention_mask": mask}
        if token_types is not None:
            inputs["token_type_ids"] = pad_rows(token_types, 0)[0]
        inputs = {name: tensor.to(self._device) for name, tensor in inputs.items()}
        return self._model(**inputs).logits.float().squeeze(-1).cpu().numpy()  # (rows,)

    def to_dict(self) -> dict[str, Any]:
        """Serializes the ranker: `{"type": ..., "init_parameters": {...}}` with every constructor parameter."""
        parameters = {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}
        parameters["device"] = None if self.device is None else str(self.device)
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "init_parameters": parameters}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CrossEncoderRanker":
        """Rebuilds a ranker from `to_dict()`'s form."""
        return cls(**data.get("init_parameters", {}))


# Model types whose sequence classifier reads the first token's last hidden state alone, through encoder layers of
# BERT's structure (`attention.self.query/key/value`, `attention.output`, `intermediate`, `output`).
FIRST_TOKEN_CLASSIFIERS = ("bert", "roberta", "xlm-roberta", "electra")


class FirstTokenLayer(torch.nn.Module):
    """
    An encoder's last layer computed for the first token alone: its query attends over every token's keys and
    values, and only its row goes through the attention output and the feed-forward block. The classifier reads that
    row only, so the logits are the full layer's (the same operations on the first row; about 5/6 of the last
    layer's work saved). Returns `(batch, 1, hidden)`.
    """

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        """`(batch, length, hidden)` states and the 4-D attention mask (or None) -> `(batch, 1, hidden)`; the
        encoder's other arguments (cross-attention, cache) are not used by an encoder-only classifier."""
        attention = self.layer.attention.self
        batch, length, _ = hidden_states.shape
        first = hidden_states[:, :1]  # (batch, 1, hidden)

        def heads(tensor: torch.Tensor) -> torch.Tensor:  # (batch, n, hidden) -> (batch, heads, n, head size)
            return tensor.view(batch, -1, attention.num_attention_heads, attention.attention_head_size).transpose(1, 2)

        mask = None if attention_mask is None else attention_mask[:, :, :1, :]  # (batch, 1, 1, length)
        context = torch.nn.functional.scaled_dot_product_attention(
            heads(attention.query(first)), heads(attention.key(hidden_states)), heads(attention.value(hidden_states)),
            attn_mask=mask, scale=attention.scaling,
        )  # fmt: skip
        context = self.layer.attention.output(context.transpose(1, 2).reshape(batch, 1, -1), first)
        return self.layer.output(self.layer.intermediate(context), context)


def first_token_last_layer(model: torch.nn.Module) -> torch.nn.Module:
    """
    `model` with its encoder's last layer computed for the first token alone (`FirstTokenLayer`) where its type is
    one of `FIRST_TOKEN_CLASSIFIERS` with absolute positions and no decoder; else `model` as it is.
    """
    config = model.config
    absolute = getattr(config, "position_embedding_type", "absolute") in (None, "absolute")
    encoder = getattr(model.base_model, "encoder", None)
    if config.model_type not in FIRST_TOKEN_CLASSIFIERS or not absolute or config.is_decoder or encoder is None:
        return model
    encoder.layer[-1] = FirstTokenLayer(encoder.layer[-1])
    return model


def deduplicate(documents: list[Document]) -> list[Document]:
    """
    One document per id, as Haystack's ranker deduplicates: the copy with the highest score (a document without
    one counts as -inf; the first of equals), at the place of the id's first appearance.
    """
    best: dict[str | None, Document] = {}
    for doc in documents:
        kept = best.get(doc.id)
        if kept is None or _score(doc) > _score(kept):
            best[doc.id] = doc
    return list(best.values())


def _score(document: Document) -> float:
    score = getattr(document, "score", None)
    return -np.inf if score is None else score


def scale(logits: np.ndarray, settings: RankerSettings) -> np.ndarray:
    """`sigmoid(calibration_factor * logits)` with `scale_score`, else the logits; float32."""
    if not settings.scale_score:
        return logits
    return torch.sigmoid(torch.from_numpy(logits * np.float32(settings.calibration_factor))).numpy()


def select(documents: list[Document], scores: np.ndarray, settings: RankerSettings) -> list[ScoredDocument]:
    """The documents with their scores, best first (ties in input order), at least `score_threshold`, `top_k`."""
    order = sorted(range(len(documents)), key=lambda index: float(scores[index]), reverse=True)
    ranked = [_with_score(documents[index], float(scores[index])) for index in order]
    if settings.score_threshold is not None:
        ranked = [doc for doc in ranked if doc.score >= settings.score_threshold]
    return ranked[: settings.top_k]


def _with_score(document: Document, score: float) -> ScoredDocument:
    return ScoredDocument(content=document.content, id=document.id, meta=dict(document.meta), score=score)


__all__ = [
    "CrossEncoderConfig",
    "CrossEncoderRanker",
    "FirstTokenLayer",
    "RankerSettings",
    "deduplicate",
    "first_token_last_layer",
    "scale",
    "select",
]
