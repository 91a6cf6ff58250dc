"""
Fine-tuning, engine-free: windowed train features (`features`), the training loop (`loop`), SQuAD v2 predictions
with the null score (`predict`) and cloze questions from local text (`cloze`). Ray Train runs the same loop from
`jobs/train/`. The public names load on first use.
"""

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    "ClozeConfig": "qa_core.training.cloze",
    "ClozeSplit": "qa_core.training.cloze",
    "FeatureError": "qa_core.training.features",
    "TrainConfig": "qa_core.training.loop",
    "TrainFeature": "qa_core.training.features",
    "TrainHooks": "qa_core.training.loop",
    "TrainResult": "qa_core.training.loop",
    "evaluate_model": "qa_core.training.predict",
    "generate_cloze": "qa_core.training.cloze",
    "latest_checkpoint": "qa_core.training.loop",
    "load_model": "qa_core.training.loop",
    "predict_squad": "qa_core.training.predict",
    "prepare_train_features": "qa_core.training.features",
    "read_paragraphs": "qa_core.training.cloze",
    "train": "qa_core.training.loop",
    "train_loop_per_worker": "qa_core.training.loop",
}
__all__ = [
    "ClozeConfig",
    "ClozeSplit",
    "FeatureError",
    "TrainConfig",
    "TrainFeature",
    "TrainHooks",
    "TrainResult",
    "evaluate_model",
    "generate_cloze",
    "latest_checkpoint",
    "load_model",
    "predict_squad",
    "prepare_train_features",
    "read_paragraphs",
    "train",
    "train_loop_per_worker",
]

if TYPE_CHECKING:
    from qa_core.training.cloze import ClozeConfig, ClozeSplit, generate_cloze, read_paragraphs
    from qa_core.training.features import FeatureError, TrainFeature, prepare_train_features
    from qa_core.training.loop import (
        TrainConfig,
        TrainHooks,
        TrainResult,
        latest_checkpoint,
        load_model,
        train,
        train_loop_per_worker,
    )
    from qa_core.training.predict import evaluate_model, predict_squad


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'qa_core.training' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)
