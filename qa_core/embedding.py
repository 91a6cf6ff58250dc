"""
SentenceEmbedder: texts to vectors with a model in the sentence-transformers layout (`modules.json`: Transformer ->
Pooling -> optional Normalize), run on transformers directly, equal to `SentenceTransformer.encode` (and so to
Haystack's `SentenceTransformersDocumentEmbedder` / `SentenceTransformersTextEmbedder`) within 1e-5.

The pooling and the normalisation are read from the model folder, never assumed. transformers directly rather than
sentence-transformers: the vectors were equal within 1.2e-7 and it ran 1.1x-2.2x `encode`'s passages/s on the
same passages and threads (`python -m jobs.bench.embedding`, docs/benchmarks.md), as its batches are cut by a
token budget on length-sorted texts (`inference.length_sorted_batches`) where `encode` cuts a fixed count of 32;
and it keeps sentence-transformers (and its own dependencies) out of the job's.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from qa_core.hardware import PRECISION_DTYPES, resolve_precision
from qa_core.inference import default_batch_tokens, length_sorted_batches, pad_rows, resolve_device
from qa_core.models import DEFAULT_TOKEN, ModelSettings, model_fingerprint, resolve_token

MODULES_FILE = "modules.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"
POOLING_MODULE = "sentence_transformers.models.Pooling"
NORMALIZE_MODULE = "sentence_transformers.models.Normalize"
# The pooling modes handled here, as 1_Pooling/config.json names them (`pooling_mode_<name>`).
POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")


@dataclass(frozen=True)
class EmbeddingModelConfig:
    """
    What a sentence-transformers model folder says of how to embed.

    :param folder: The model folder.
    :param pooling: One of `POOLING_MODES`.
    :param normalize: Whether vectors are scaled to unit length (a Normalize module).
    :param max_seq_length: Tokens a text is truncated to.
    :param do_lower_case: Whether texts are lower-cased first.
    :param dimension: The vectors' dimension.
    """

    folder: Path
    pooling: str
    normalize: bool
    max_seq_length: int | None
    do_lower_case: bool
    dimension: int

    @classmethod
    def read(cls, folder: str | Path) -> "EmbeddingModelConfig":
        """
        Reads `modules.json`, the Pooling module's `config.json` and `sentence_bert_config.json`.

        :raises ValueError: Naming the missing file or module, or an unsupported layout.
        """
        folder = Path(folder)
        modules = read_model_json(folder / MODULES_FILE, "the sentence-transformers module list")
        types = [module.get("type") for module in modules]
        if not types or types[0] != TRANSFORMER_MODULE:
            raise ValueError(f"{folder / MODULES_FILE}: the first module must be {TRANSFORMER_MODULE}, not {types[:1]}")
        pooling_modules = [module for module in modules if module.get("type") == POOLING_MODULE]
        if not pooling_modules:
            raise ValueError(f"{folder / MODULES_FILE}: no {POOLING_MODULE} module: the model has no pooling")
        unknown = [kind for kind in types if kind not in (TRANSFORMER_MODULE, POOLING_MODULE, NORMALIZE_MODULE)]
        if unknown:
            raise ValueError(f"{folder / MODULES_FILE}: modules {unknown} are not supported (only Transformer, "
                             "Pooling and Normalize)")  # fmt: skip
        pooling_file = folder / pooling_modules[0].get("path", "") / "config.json"
        pooling_config = read_model_json(pooling_file, "the pooling configuration")
        modes = [key.removeprefix("pooling_mode_") for key, on in pooling_config.items()
                 if key.startswith("pooling_mode_") and on]  # fmt: skip
        if len(modes) != 1 or modes[0] not in POOLING_MODES:
            raise ValueError(f"{pooling_file}: one pooling mode of {POOLING_MODES} must be on, not {modes}")
        if "word_embedding_dimension" not in pooling_config:
            raise ValueError(f"{pooling_file}: no word_embedding_dimension")
        transformer = folder / TRANSFORMER_CONFIG_FILE
        settings = read_model_json(transformer, "the transformer settings") if transformer.is_file() else {}
        return cls(
            folder=folder,
            pooling=modes[0],
            normalize=NORMALIZE_MODULE in types,
            max_seq_length=settings.get("max_seq_length"),
            do_lower_case=bool(settings.get("do_lower_case", False)),
            dimension=int(pooling_config["word_embedding_dimension"]),
        )


def read_model_json(path: Path, what: str) -> Any:
    """A JSON file's content, or a ValueError naming the file and what it should hold."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: missing ({what} of a sentence-transformers model folder)") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None


def resolve_model_folder(model: str) -> Path:
    """A local folder as it is; a hub id downloaded into the hub cache (with the hub token) or found there."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, token=resolve_token(DEFAULT_TOKEN)))


def embedding_fingerprint(model: str) -> str:
    """One hex digest of the model's files (`models.model_fingerprint`), to refuse vectors of another model."""
    files = model_fingerprint(ModelSettings(model=str(resolve_model_folder(model))))
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode("utf-8")).hexdigest()


class SentenceEmbedder:
    """
    Embeds texts as `SentenceTransformer(model).encode(texts)` does, in length-sorted batches of at most
    `batch_tokens` padded tokens.

    Usage example:
    ```python
    embedder = SentenceEmbedder("path/to/all-MiniLM-L6-v2")
    embedder.warm_up()
    vectors = embedder.embed(["Paris is in France.", "Berlin"])  # (2, 384) float32
    ```
    """

    def __init__(
        self,
        model: str,
        precision: str = "fp32",
        batch_tokens: int | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        """
        :param model: A sentence-transformers model folder or hub id.
        :param precision: `fp32`, `bf16` (the encoder in bfloat16, pooling in fp32) or `auto` (bf16 where fast).
        :param batch_tokens: Most padded tokens per forward pass; None: the reader's default for the device and
            precision (`qa_core.inference.default_batch_tokens`: on a CPU 2,048 in fp32, 4,096 in bf16).
        :param device: Where the model runs; None: the first GPU, else the CPU.
        """
        self.model = model
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        dtype = PRECISION_DTYPES[self.precision]
        self.batch_tokens = batch_tokens or default_batch_tokens(self.device, dtype)
        self.config: EmbeddingModelConfig | None = None
        self._encoder: Any = None
        self._tokenizer: Any = None

    def warm_up(self) -> None:
        """Reads the model folder's configuration and loads the tokenizer and encoder. Calling it again does nothing."""
        if self._encoder is not None:
            return
        from transformers import AutoModel, AutoTokenizer

        self.config = EmbeddingModelConfig.read(resolve_model_folder(self.model))
        self._tokenizer = AutoTokenizer.from_pretrained(self.config.folder)
        encoder = AutoModel.from_pretrained(self.config.folder, dtype=PRECISION_DTYPES[self.precision])
        self._encoder = encoder.to(self.device).eval()

    @property
    def dimension(self) -> int:
        """The vectors' dimension (after `warm_up`)."""
        return self._warm_config().dimension

    def embed(self, texts: list[str], names: list[str] | None = None) -> np.ndarray:
        """
        :param texts: The texts (any lengths; truncated to the model's `max_seq_length` tokens).
        :param names: What the error for a NaN vector calls the texts (e.g. passage ids); None: their indices.
        :returns: `(texts, dimension)` float32 vectors, in input order.
        :raises RuntimeError: If `warm_up()` was not called.
        :raises ValueError: If a vector holds NaN, naming its texts (at most 10).
        """
        config = self._warm_config()
        texts = [text.lower() for text in texts] if config.do_lower_case else list(texts)
        vectors = np.zeros((len(texts), config.dimension), np.float32)
        if not texts:
            return vectors
        encoded = self._tokenizer(
            texts, truncation="longest_first", max_length=config.max_seq_length, return_attention_mask=False
        )["input_ids"]
        for batch in length_sorted_batches(encoded, self.batch_tokens):
            vectors[batch] = self._embed_batch([encoded[index] for index in batch])
        bad = np.flatnonzero(np.isnan(vectors).any(axis=1))
        if bad.size:
            named = [names[index] for index in bad[:10]] if names is not None else bad[:10].tolist()
            raise ValueError(f"The embeddings of {bad.size} of {len(texts)} texts hold NaN: {named}.")
        return vectors

    @torch.inference_mode()
    def _embed_batch(self, sequences: list[list[int]]) -> np.ndarray:
        """One forward pass over token id lists -> `(batch, dimension)` pooled (and normalised) float32 vectors."""
        input_ids, mask = pad_rows(sequences, self._tokenizer.pad_token_id)
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        tokens = self._encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()  # (b, seq, dim)
        pooled = pool(tokens, mask, self._warm_config().pooling)
        if self._warm_config().normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.cpu().numpy()

    def _warm_config(self) -> EmbeddingModelConfig:
        if self.config is None:
            raise RuntimeError("The embedder is not warmed up: call warm_up() before embed().")
        return self.config


def pool(tokens: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """
    sentence-transformers' Pooling of `(batch, seq, dim)` token vectors under a `(batch, seq)` attention mask.

    :param mode: One of `POOLING_MODES`.
    :returns: `(batch, dim)` vectors.
    """
    if mode == "cls_token":
        return tokens[:, 0]
    expanded = mask.unsqueeze(-1).to(tokens.dtype)  # (batch, seq, 1)
    if mode == "max_tokens":
        return tokens.masked_fill(expanded == 0, -1e9).max(dim=1).values
    summed = (tokens * expanded).sum(dim=1)
    counts = expanded.sum(dim=1).clamp(min=1e-9)  # (batch, 1)
    return summed / (counts if mode == "mean_tokens" else torch.sqrt(counts))
