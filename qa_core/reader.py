"""ExtractiveReader: Haystack's extractive reader semantics, answering many queries per forward pass."""

import dataclasses
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForQuestionAnswering

from qa_core.answers import ExtractedAnswer
from qa_core.document import Document
from qa_core.hardware import PRECISION_DTYPES, resolve_precision
from qa_core.inference import InferenceSettings, predict_spans, resolve_device
from qa_core.models import DEFAULT_TOKEN, DTYPE_KEYS, ModelSettings, load_tokenizer, resolve_token
from qa_core.secret import Secret
from qa_core.selection import (
    DocumentText,
    SelectionSettings,
    SpanCandidate,
    as_span_candidate,
    candidate_answers,
    rank_answers,
    select_spans,
)
from qa_core.spans import SequenceSpans
from qa_core.tokenization import Sequence, TokenizationSettings, tokenize_pairs

logger = logging.getLogger(__name__)

# The reader's parameters, by phase: each phase's settings class defines their defaults, documentation and checks.
PHASES = {"tokenization": TokenizationSettings, "inference": InferenceSettings, "selection": SelectionSettings}
_MODEL, _TOKENIZATION, _INFERENCE, _SELECTION = (ModelSettings(), *(phase() for phase in PHASES.values()))
_PRECISION_NAMES = {dtype: name for name, dtype in PRECISION_DTYPES.items()}


@dataclass(frozen=True)
class ReaderSettings:
    """The reader's parameters for one call, after run-time overrides, by phase."""

    tokenization: TokenizationSettings
    inference: InferenceSettings
    selection: SelectionSettings

    def problems(self) -> list[str]:
        """Every phase's problems."""
        phases = (self.tokenization, self.inference, self.selection)
        return [problem for phase in phases for problem in phase.problems()]


def serialize_model_kwargs(model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turns torch dtypes into strings such as `"torch.float16"`."""
    return {key: str(value) if isinstance(value, torch.dtype) else value for key, value in model_kwargs.items()}


def deserialize_model_kwargs(model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turns `"torch.float16"`-style strings under `torch_dtype` / `dtype` back into torch dtypes."""
    restored = dict(model_kwargs)
    for key in DTYPE_KEYS:
        value = restored.get(key)
        if isinstance(value, str) and value.startswith("torch."):
            dtype = getattr(torch, value.removeprefix("torch."), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"model_kwargs[{key!r}] = {value!r} is not a torch dtype.")
            restored[key] = dtype
    return restored


class ExtractiveReader:
    """
    Finds the spans of documents that answer a query, with Haystack's `ExtractiveReader` semantics.

    Every span is scored on its own (`sigmoid(calibration_factor * (start_logit + end_logit))`), so scores are
    comparable across documents. `run_batch` answers many queries at once: all their sequences share
    length-sorted forward batches, and each query's answers equal those of `run` for it alone.

    Usage example:
    ```python
    from qa_core import Document, ExtractiveReader

    reader = ExtractiveReader(model="path/to/qa-model")
    reader.warm_up()
    docs = [Document(content="Python is a popular programming language")]
    answers = reader.run(query="What is a popular programming language?", documents=docs)["answers"]
    ```

    Differences from Haystack: run-time overrides test `is None`, so falsy values such as `stride=0` and
    `score_threshold=0.0` are honoured (Haystack's `x or default` swallows them); `max_batch_size=None` runs
    batches of 32 sequences instead of all sequences at once (same answers, bounded memory).
    """

    def __init__(
        self,
        model: Path | str = _MODEL.model,
        device: str | torch.device | None = None,
        token: Secret | None = DEFAULT_TOKEN,
        top_k: int = _SELECTION.top_k,
        score_threshold: float | None = _SELECTION.score_threshold,
        max_seq_length: int = _TOKENIZATION.max_seq_length,
        stride: int = _TOKENIZATION.stride,
        max_batch_size: int | None = _INFERENCE.max_batch_size,
        answers_per_seq: int | None = _INFERENCE.answers_per_seq,
        no_answer: bool = _SELECTION.no_answer,
        calibration_factor: float = _INFERENCE.calibration_factor,
        overlap_threshold: float | None = _SELECTION.overlap_threshold,
        model_kwargs: dict[str, Any] | None = None,
        max_answer_length: int | None = _INFERENCE.max_answer_length,
        context_window_size: int | None = _SELECTION.context_window_size,
        quantization: str | None = _MODEL.quantization,
        max_batch_tokens: int | None = _INFERENCE.max_batch_tokens,
        precision: str = _MODEL.precision,
    ) -> None:
        """
        Creates the reader; `warm_up()` loads the model.

        :param model: A Hugging Face question-answering model: a local folder or a hub identifier.
        :param device: Where to run the model (`"cpu"`, `"cuda:1"`, ...); `None` picks CUDA when present, else CPU.
        :param token: Token for private models on the hub; serialised by its environment variables only.
        :param top_k: Answers to return per query (plus the no-answer entry when `no_answer` is set).
        :param score_threshold: Return only answers (the no-answer entry included) scoring at least this.
        :param max_seq_length: Most tokens in one sequence; longer documents are split.
        :param stride: Tokens shared by consecutive windows of a split document.
        :param max_batch_size: Most sequences in one forward pass; `None`: as many as `max_batch_tokens` allows.
        :param answers_per_seq: Candidate spans kept per sequence; `None` for 20.
        :param no_answer: Add an answer with `data=None` scoring the chance that no kept answer is right.
        :param calibration_factor: Multiplies summed logits before the sigmoid.
        :param overlap_threshold: Drop an answer overlapping a better one of the same document by more than this
            share of either span's length; `None` keeps all.
        :param model_kwargs: Passed to `AutoModelForQuestionAnswering.from_pretrained`
            (`torch_dtype` / `dtype` may be given as a string such as `"torch.float16"`).
        :param max_answer_length: Longest answer in tokens; `None` for no limit (Haystack's behaviour).
        :param context_window_size: When set, answers get about this many characters of surrounding text in
            `context`, with `context_offset` locating the answer there.
        :param quantization: `"int8"` quantizes the model's Linear layers to int8 dynamically (CPU only, opt-in:
            faster, and answers may differ slightly from fp32); `None` keeps the model's weights as loaded.
        :param max_batch_tokens: Most padded tokens in one forward pass (sequences of similar length are batched
            until their count times the longest reaches it); `None`: the default for the device and the model's dtype
            (`qa_core.inference.InferenceSettings.batch_tokens`: on a CPU 2,048 in fp32, 4,096 in bf16).
        :param precision: `"fp32"`; `"bf16"`: the model's weights and matrix products in bfloat16, spans decoded in
            fp32 (faster where the device has bf16 units, best spans nearly always the same); `"auto"`: bf16 where
            `qa_core.hardware.fast_bf16` finds such units on the device, else fp32 (`precision_used` says what ran).
        :raises ValueError: Naming every parameter whose value is unusable (`top_k=0`, `stride >= max_seq_length`,
            an unknown `quantization`, ...).
        """
        self.model = str(model)
        self.device = device
        self.token = token
        self.top_k = top_k
        self.score_threshold = score_threshold
        self.max_seq_length = max_seq_length
        self.stride = stride
        self.max_batch_size = max_batch_size
        self.answers_per_seq = answers_per_seq
        self.no_answer = no_answer
        self.calibration_factor = calibration_factor
        self.overlap_threshold = overlap_threshold
        self.model_kwargs = dict(model_kwargs or {})
        self.max_answer_length = max_answer_length
        self.context_window_size = context_window_size
        self.quantization = quantization
        self.max_batch_tokens = max_batch_tokens
        self.precision = precision
        self.precision_used: str | None = None  # what the model runs in once warmed up: fp32, bf16, fp16 or int8
        self._model: torch.nn.Module | None = None
        self._tokenizer: Any = None
        self._device: torch.device | None = None
        problems = self.model_settings.problems() + self._settings().problems()
        if problems:
            raise ValueError("Invalid ExtractiveReader parameters: " + "; ".join(problems) + ".")

    @property
    def model_settings(self) -> ModelSettings:
        """The model and how it is loaded."""
        return ModelSettings(self.model, self.precision, self.quantization, self.model_kwargs)

    def warm_up(self) -> None:
        """Loads the model and tokenizer onto the device. Calling it again does nothing."""
        if self._model is not None:
            return
        token = resolve_token(self.token)
        model_kwargs = deserialize_model_kwargs(self.model_kwargs)
        trust_remote_code = self.model_settings.trust_remote_code
        if "device_map" not in model_kwargs:  # known before loading: refused at once
            self._check_quantization_device(resolve_device(self.device))
        model_kwargs.setdefault("trust_remote_code", False)  # custom model code runs only when the user says so
        model = AutoModelForQuestionAnswering.from_pretrained(self.model, token=token, **model_kwargs)
        self._tokenizer = load_tokenizer(self.model, self.token, trust_remote_code)
        if "device_map" in model_kwargs:
            self._device = model.device
        else:
            self._device = resolve_device(self.device)
            model = model.to(self._device)
        self._check_quantization_device(self._device)
        if resolve_precision(self.precision, self._device) == "bf16":
            model = model.to(torch.bfloat16)
        if self.quantization == "int8":
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        self.precision_used = self.quantization or _PRECISION_NAMES.get(model.dtype, str(model.dtype))
        self._model = model.eval()

    def _check_quantization_device(self, device: torch.device) -> None:
        """Refuses quantization anywhere but on the CPU."""
        if self.quantization is not None and device.type != "cpu":
            raise ValueError(f"{self.quantization} quantization runs on the CPU only, not on {device}.")

    def _settings(self, **overrides: Any) -> ReaderSettings:
        """
        The constructor's parameters with run-time overrides applied, by phase; `None` keeps the constructor's value.

        :raises ValueError: When an override is unusable, naming it.
        """
        phases = {}
        for name, phase in PHASES.items():
            values = {}
            for spec in dataclasses.fields(phase):
                value = overrides.get(spec.name)
                values[spec.name] = getattr(self, spec.name) if value is None else value
            phases[name] = phase(**values)
        settings = ReaderSettings(**phases)
        problems = settings.problems()  # the constructor's values passed: these come from the overrides
        if problems and overrides:
            raise ValueError("Invalid run-time parameters: " + "; ".join(problems) + ".")
        return settings

    def run(
        self,
        query: str,
        documents: list[Document],
        top_k: int | None = None,
        score_threshold: float | None = None,
        max_seq_length: int | None = None,
        stride: int | None = None,
        max_batch_size: int | None = None,
        answers_per_seq: int | None = None,
        no_answer: bool | None = None,
        overlap_threshold: float | None = None,
        max_batch_tokens: int | None = None,
    ) -> dict[str, list[ExtractedAnswer]]:
        """
        Finds the answers to one query in the documents.

        Run-time parameters override the constructor's for this call; `None` keeps the constructor's value.

        :param query: The question.
        :param documents: Where to look. Documents without content are skipped with a warning.
        :returns: `{"answers": [...]}`, best first, the no-answer entry in score order.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        result = self.run_batch(
            [query],
            [documents],
            top_k=top_k,
            score_threshold=score_threshold,
            max_seq_length=max_seq_length,
            stride=stride,
            max_batch_size=max_batch_size,
            answers_per_seq=answers_per_seq,
            no_answer=no_answer,
            overlap_threshold=overlap_threshold,
            max_batch_tokens=max_batch_tokens,
        )
        return {"answers": result["answers"][0]}

    def run_batch(
        self,
        queries: list[str],
        documents: list[list[Document]],
        top_k: int | None = None,
        score_threshold: float | None = None,
        max_seq_length: int | None = None,
        stride: int | None = None,
        max_batch_size: int | None = None,
        answers_per_seq: int | None = None,
        no_answer: bool | None = None,
        overlap_threshold: float | None = None,
        max_batch_tokens: int | None = None,
    ) -> dict[str, list[list[ExtractedAnswer]]]:
        """
        Answers many queries, each in its own documents; all their sequences share forward batches.

        `run_batch(qs, ds)["answers"][i]` equals `run(qs[i], ds[i])["answers"]`.

        :param queries: The questions.
        :param documents: One list of documents per question.
        :returns: `{"answers": [[...], ...]}`, one list per query.
        :raises RuntimeError: If `warm_up()` was not called.
        :raises ValueError: If `queries` and `documents` differ in length.
        """
        if self._model is None:
            raise RuntimeError("The reader is not warmed up: call warm_up() before run() or run_batch().")
        if len(queries) != len(documents):
            raise ValueError(f"Got {len(queries)} queries but {len(documents)} document lists.")
        settings = self._settings(
            top_k=top_k,
            score_threshold=score_threshold,
            max_seq_length=max_seq_length,
            stride=stride,
            max_batch_size=max_batch_size,
            answers_per_seq=answers_per_seq,
            no_answer=no_answer,
            overlap_threshold=overlap_threshold,
            max_batch_tokens=max_batch_tokens,
        )
        pairs = [(index, doc) for index, docs in enumerate(documents) for doc in _with_content(docs)]
        queries_of_pairs = [queries[index] for index, _ in pairs]
        contents = [doc.content for _, doc in pairs]
        sequences = tokenize_pairs(self._tokenizer, queries_of_pairs, contents, settings.tokenization)
        spans = self._predict(sequences, settings.inference)
        sources = [DocumentText.of(doc) for _, doc in pairs]
        candidates: list[list[ExtractedAnswer] | None] = [None] * len(queries)  # None: no document with content
        for sequence, sequence_spans in zip(sequences, spans, strict=True):
            query_index = pairs[sequence.pair_index][0]
            source = sources[sequence.pair_index]
            window_size = settings.selection.context_window_size
            found = candidate_answers(queries[query_index], source, sequence_spans, window_size)
            if candidates[query_index] is None:
                candidates[query_index] = []
            candidates[query_index].extend(found)
        answers = [
            [] if query_candidates is None else rank_answers(query, query_candidates, settings.selection)
            for query, query_candidates in zip(queries, candidates, strict=True)
        ]
        return {"answers": answers}

    def tokenize(self, queries: list[str], contents: list[str]) -> list[Sequence]:
        """
        The sequences `predict` reads for (query, document content) pairs, windowed by the reader's settings, as
        `run_batch` makes them.

        :raises RuntimeError: If `warm_up()` was not called.
        """
        if self._tokenizer is None:
            raise RuntimeError("The reader is not warmed up: call warm_up() before tokenize().")
        return tokenize_pairs(self._tokenizer, queries, contents, self._settings().tokenization)

    def predict(
        self,
        sequences: list[Sequence],
        max_batch_size: int | None = None,
        answers_per_seq: int | None = None,
        max_batch_tokens: int | None = None,
    ) -> list[SequenceSpans]:
        """
        The best spans of sequences tokenized by `qa_core.tokenization.tokenize_pairs` (the Ray job tokenizes in a
        CPU stage of its own and runs only this on the model's device).

        :param sequences: The sequences.
        :param max_batch_size: Overrides the constructor's value when not `None`.
        :param answers_per_seq: Overrides the constructor's value when not `None`.
        :param max_batch_tokens: Overrides the constructor's value when not `None`.
        :returns: One `SequenceSpans` per sequence, in order.
        :raises RuntimeError: If `warm_up()` was not called.
        """
        if self._model is None:
            raise RuntimeError("The reader is not warmed up: call warm_up() before predict().")
        settings = self._settings(
            max_batch_size=max_batch_size, answers_per_seq=answers_per_seq, max_batch_tokens=max_batch_tokens
        )
        return self._predict(sequences, settings.inference)

    def _predict(self, sequences: list[Sequence], settings: InferenceSettings) -> list[SequenceSpans]:
        return predict_spans(self._model, sequences, self._tokenizer.pad_token_id, settings, self._device)

    def deduplicate_by_overlap(
        self, answers: list[ExtractedAnswer], overlap_threshold: float | None
    ) -> list[ExtractedAnswer]:
        """
        Drops answers that overlap an earlier answer of the same document by more than `overlap_threshold` of
        either span's length ("the river" inside "in the river in Maine" overlaps 1.0; "the river in" and
        "in Maine" overlap 0.25). Answers are compared in the given order; `None` keeps all.

        :param answers: Answers, best first.
        :param overlap_threshold: The largest overlap share allowed, or `None`.
        :returns: The kept answers, in order.
        """
        candidates = [as_span_candidate(answer) for answer in answers]
        kept = _select_in_order(candidates, overlap_threshold)
        return [answers[index] for index in kept]

    def to_dict(self) -> dict[str, Any]:
        """
        Serializes the reader: `{"type": ..., "init_parameters": {...}}` with every constructor parameter.
        The token appears only as the names of its environment variables.
        """
        parameters = {name: getattr(self, name) for name in inspect.signature(type(self)).parameters}
        parameters["device"] = None if self.device is None else str(self.device)
        parameters["token"] = self.token.to_dict() if self.token is not None else None
        parameters["model_kwargs"] = serialize_model_kwargs(self.model_kwargs)
        return {"type": f"{type(self).__module__}.{type(self).__qualname__}", "init_parameters": parameters}

    @classmethod
    def from_settings(
        cls, model: ModelSettings, *phases: TokenizationSettings | InferenceSettings | SelectionSettings, **kwargs: Any
    ) -> "ExtractiveReader":
        """
        A reader built from settings objects (the phases not given keep their defaults).

        :param model: The model and how it is loaded.
        :param phases: Any of the tokenization, inference and selection settings.
        :param kwargs: `device` and `token`.
        """
        parameters = {name: value for phase in (model, *phases) for name, value in phase.as_dict().items()}
        return cls(**parameters, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExtractiveReader":
        """Rebuilds a reader from `to_dict()`'s form."""
        parameters = dict(data.get("init_parameters", {}))
        if parameters.get("token") is not None:
            parameters["token"] = Secret.from_dict(parameters["token"])
        if parameters.get("model_kwargs") is not None:
            parameters["model_kwargs"] = deserialize_model_kwargs(parameters["model_kwargs"])
        return cls(**parameters)


def _with_content(documents: list[Document]) -> list[Document]:
    """The documents that have text; the others are skipped with a warning."""
    kept = []
    for doc in documents:
        if doc.content is None:
            logger.warning("Document %s has no content and is skipped.", doc.id)
        else:
            kept.append(doc)
    return kept


def _select_in_order(candidates: list[SpanCandidate], overlap_threshold: float | None) -> list[int]:
    """De-duplication without re-ranking: candidates already in the order to compare them in."""
    return select_spans(candidates, [0.0] * len(candidates), top_k=None, overlap_threshold=overlap_threshold)
