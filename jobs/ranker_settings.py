"""
Whether and how a run reranks each retrieved question's documents with a cross-encoder (`RankingSettings`): the
job's options of `qa_core.ranker.RankerSettings`, named `ranker_*` (the reader has its own `top_k`,
`score_threshold` and `calibration_factor`), their defaults and help the component's.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

from qa_core.hardware import PRECISIONS
from qa_core.ranker import RankerSettings
from qa_core.settings import Settings, setting

PREFIX = "ranker_"
# The documents' metadata a job's ranker can put before their content (`ranker_meta_fields_to_embed`): the columns
# the retrieved documents carry from the index's stores (`jobs.bulk_qa.workers.fetch`).
RANKER_META_FIELDS = ("page_number", "file_path")


def _as_ranker(name: str) -> Any:
    """The field `ranker_<name>`: `RankerSettings.<name>`'s default and help."""
    spec = next(spec for spec in dataclasses.fields(RankerSettings) if spec.name == name)
    return dataclasses.field(default=spec.default, default_factory=spec.default_factory, metadata=spec.metadata)


@dataclass(frozen=True)
class RankingSettings(Settings):
    """How a cross-encoder reranks each retrieved question's documents before they are read (--ranker)."""

    ranker: str | None = setting(
        None,
        "cross-encoder (a sentence-transformers CrossEncoder folder, or a hub id) that reranks the documents "
        "retrieved for each question, as Haystack's SentenceTransformersSimilarityRanker; None: no ranking",
    )
    ranker_top_k: int = _as_ranker("top_k")
    ranker_scale_score: bool = _as_ranker("scale_score")
    ranker_calibration_factor: float = _as_ranker("calibration_factor")
    ranker_score_threshold: float | None = _as_ranker("score_threshold")
    ranker_meta_fields_to_embed: list[str] = _as_ranker("meta_fields_to_embed")
    ranker_embedding_separator: str = _as_ranker("embedding_separator")
    ranker_query_prefix: str = _as_ranker("query_prefix")
    ranker_query_suffix: str = _as_ranker("query_suffix")
    ranker_document_prefix: str = _as_ranker("document_prefix")
    ranker_document_suffix: str = _as_ranker("document_suffix")
    ranker_batch_size: int | None = _as_ranker("batch_size")
    ranker_max_batch_tokens: int | None = _as_ranker("max_batch_tokens")
    ranker_precision: str = setting("fp32", "the ranker model's: fp32, bf16, or auto (bf16 where fast)")

    def component_settings(self) -> RankerSettings:
        """The `ranker_*` options as the component's settings."""
        names = RankerSettings.types()
        return RankerSettings(**{name: getattr(self, PREFIX + name) for name in names})

    def problems(self) -> list[str]:
        meta = self.ranker_meta_fields_to_embed
        if isinstance(meta, list) and not set(meta) <= set(RANKER_META_FIELDS):
            unknown = sorted(set(map(str, meta)) - set(RANKER_META_FIELDS))
            problems = [
                f"ranker_meta_fields_to_embed: the documents' metadata the ranker can embed is "
                f"{', '.join(RANKER_META_FIELDS)}, not {', '.join(unknown)}"
            ]
        else:
            problems = []
        problems += [PREFIX + problem for problem in self.component_settings().problems()]
        if self.ranker_precision not in PRECISIONS:
            problems.append(f"ranker_precision must be one of {', '.join(PRECISIONS)}, not {self.ranker_precision!r}")
        return problems
