"""
The fine-tuning loop: AdamW with linear warmup and decay, start/end cross-entropy, gradient clipping, a per-epoch
checkpoint and an optional evaluation after each epoch.

The loop is one plain function, `train`, that knows nothing of Ray. It runs in one process as it is, and as Ray
Train's `train_loop_per_worker` (see `train_loop_per_worker`) with a `TrainHooks` subclass doing the distributed
parts (`jobs/train/`). With several workers it reads the process group from `torch.distributed`:

- Every optimizer step consumes one global batch of `batch_size` features, drawn from a permutation that depends on
  `(seed, epoch)` only; worker `r` of `W` takes the features `r, r + W, ...` of it. Each worker's loss is its
  features' summed loss times `W / batch`, so DDP's gradient average is the gradient of the global batch's mean
  loss: 1 worker and `W` workers take the same steps, up to float rounding.
- Checkpoints: weights with safetensors (`save_pretrained`, with the tokenizer: a checkpoint is a model folder),
  optimizer and scheduler state in `trainer_state.pt`, each worker's RNG state in `rng-rank{r}.pt`, all written with
  `torch.save` of tensors and plain containers and read back with `torch.load(..., weights_only=True)`, so loading a
  checkpoint never unpickles code; `checkpoint.json` (written last) says where training stands.

Usage example:
```python
from qa_core.squad import read_squad
from qa_core.training import TrainConfig, TrainHooks, load_model, train

model, tokenizer = load_model("path/to/base-model", seed=0)
examples = read_squad("train-v2.0.json").examples
result = train(model, tokenizer, examples, TrainConfig(epochs=2), hooks=TrainHooks(checkpoint_dir="checkpoints"))
result.model.save_pretrained("fine-tuned")
```
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from qa_core.inference import DEFAULT_BATCH_SIZE, resolve_device
from qa_core.settings import Settings, at_least, setting, within
from qa_core.spans import NULL_POSITION
from qa_core.tokenization import TokenizationSettings
from qa_core.training.features import collate_features, prepare_train_features

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from qa_core.squad import SquadExample

logger = logging.getLogger(__name__)

CHECKPOINT_INFO = "checkpoint.json"  # written last: its presence marks a complete checkpoint
TRAINER_STATE = "trainer_state.pt"
RNG_STATE = "rng-rank{rank}.pt"
# TrainConfig fields a resumed run must share with the run that wrote the checkpoint (they fix the batches).
_RESUME_FIELDS = ("epochs", "batch_size", "max_seq_length", "stride", "seed", "group_by_length", "max_steps")
_LENGTH_GROUP_BATCHES = 64  # group_by_length sorts chunks of this many batches by length


@dataclass(frozen=True)
class TrainConfig(Settings):
    """How a model is fine-tuned."""

    epochs: int = setting(2, "passes over the train features")
    learning_rate: float = setting(5e-5, "AdamW's peak learning rate")
    batch_size: int = setting(16, "features per optimizer step, over all workers together (the global batch)")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay (biases and LayerNorm weights get none)")
    warmup_ratio: float = setting(0.1, "share of the steps over which the learning rate rises linearly from 0")
    max_grad_norm: float | None = setting(1.0, "clip the gradients' global norm to this; None: no clipping")
    max_seq_length: int = setting(
        TokenizationSettings.max_seq_length, "tokens per window, as the reader's max_seq_length"
    )
    stride: int = setting(TokenizationSettings.stride, "tokens shared by consecutive windows, as the reader's stride")
    seed: int = setting(0, "fixes the batches, dropout and so the trained weights")
    max_steps: int | None = setting(None, "stop after this many optimizer steps in all; None: train every epoch")
    group_by_length: bool = setting(False, "batches of similar length (less padding) within chunks of 64 batches")
    eval_batch_size: int = setting(DEFAULT_BATCH_SIZE, "windows per forward pass when evaluating")
    eval_max_answer_length: int | None = setting(
        None, "longest predicted answer in tokens when evaluating; None: no limit"
    )
    progress: bool = setting(True, "show a progress bar (rank 0 only)")

    @property
    def tokenization(self) -> TokenizationSettings:
        """The windowing, shared with inference."""
        return TokenizationSettings(max_seq_length=self.max_seq_length, stride=self.stride)

    def problems(self) -> list[str]:
        problems = at_least("epochs", self.epochs, 1) + at_least("batch_size", self.batch_size, 1)
        if not self.learning_rate > 0:
            problems.append(f"learning_rate must be > 0, not {self.learning_rate}")
        problems += at_least("weight_decay", self.weight_decay, 0) + within("warmup_ratio", self.warmup_ratio, 0, 1)
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            problems.append(f"max_grad_norm must be > 0 or None, not {self.max_grad_norm}")
        problems += at_least("max_steps", self.max_steps, 1, optional=True)
        problems += at_least("eval_batch_size", self.eval_batch_size, 1)
        problems += at_least("eval_max_answer_length", self.eval_max_answer_length, 1, optional=True)
        return problems + self.tokenization.problems()


@dataclass
class TrainState:
    """Where training stands: the next batch to take is batch `step_in_epoch` of epoch `epoch` (both from 0)."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    losses: list[float] = field(default_factory=list)  # the global batch's mean loss, one per optimizer step
    epochs: list[dict[str, Any]] = field(default_factory=list)  # the metrics reported after each epoch


@dataclass
class TrainResult:
    """
    :param model: The trained model (unwrapped from DDP), in train mode.
    :param losses: The global batch's mean loss at each optimizer step, resumed runs included.
    :param epochs: The metrics reported after each epoch (`eval_*` keys when there was an evaluation).
    """

    model: PreTrainedModel
    losses: list[float]
    epochs: list[dict[str, Any]]


class TrainHooks:
    """
    What the loop asks of whoever runs it; these defaults run in this process. Ray Train's wrapper
    (`jobs/train/`) overrides them with `ray.train.torch.prepare_model`, `prepare_data_loader` and
    `ray.train.report`.

    :param checkpoint_dir: Where `report` writes each checkpoint (`epoch-N/`); `None` writes none.
    :param resume: Resume from the latest complete checkpoint under `checkpoint_dir`, when there is one.
    :param device: Where to train; `None` picks the first CUDA device when there is one, else the CPU.
    """

    def __init__(
        self, checkpoint_dir: str | Path | None = None, resume: bool = False, device: str | torch.device | None = None
    ) -> None:
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.resume = resume
        self._device = device

    def device(self) -> torch.device:
        """The device this worker trains on."""
        return resolve_device(self._device)

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as the loop runs it (Ray: moved to the device and wrapped in DDP)."""
        return model

    def prepare_data_loader(self, loader: torch.utils.data.DataLoader) -> Any:
        """The data loader as the loop iterates it (Ray: batches moved to the device)."""
        return loader

    @contextlib.contextmanager
    def checkpoint_to_resume(self) -> Iterator[Path | None]:
        """The checkpoint folder to resume from, or `None` to start afresh; valid inside the `with` block."""
        yield latest_checkpoint(self.checkpoint_dir) if self.resume and self.checkpoint_dir is not None else None

    def report(self, metrics: dict[str, Any], name: str, write_checkpoint: Callable[[Path], None]) -> None:
        """
        Called by every worker after each epoch (and when `max_steps` stops training).

        :param metrics: This worker's metrics (rank 0's carry the evaluation).
        :param name: The checkpoint's folder name (`epoch-N`, or `step-N` when stopped inside an epoch).
        :param write_checkpoint: Writes this worker's share of the checkpoint into a folder.
        """
        if self.checkpoint_dir is None:
            return
        target = self.checkpoint_dir / name
        partial_dir = self.checkpoint_dir / f".{name}.partial"
        if partial_dir.exists():
            _remove_tree(partial_dir)
        write_checkpoint(partial_dir)
        if target.exists():
            _remove_tree(target)
        partial_dir.rename(target)


def latest_checkpoint(root: str | Path | None) -> Path | None:
    """
    The complete checkpoint (one with `checkpoint.json`) furthest into training among the folders directly under
    `root` and `root` itself, or `None`.
    """
    if root is None or not Path(root).is_dir():
        return None
    root = Path(root)
    found = []
    for folder in [root, *sorted(path for path in root.iterdir() if path.is_dir())]:
        info = folder / CHECKPOINT_INFO
        if info.is_file():
            found.append((json.loads(info.read_text(encoding="utf-8"))["global_step"], folder.name, folder))
    return max(found)[2] if found else None


def read_checkpoint_info(folder: str | Path) -> dict[str, Any]:
    """The `checkpoint.json` of a checkpoint folder: epoch, step_in_epoch, global_step, losses, epochs, config."""
    return json.loads((Path(folder) / CHECKPOINT_INFO).read_text(encoding="utf-8"))


def load_model(path: str | Path, seed: int = 0) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """
    A question-answering model and its tokenizer from a local folder; a QA head the folder lacks is drawn after
    `torch.manual_seed(seed)`, so every worker starts from the same weights.
    """
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    torch.manual_seed(seed)
    model = AutoModelForQuestionAnswering.from_pretrained(str(path))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return model, tokenizer


def train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Seq[SquadExample],
    config: TrainConfig,
    eval_examples: Seq[SquadExample] | None = None,
    hooks: TrainHooks | None = None,
) -> TrainResult:
    """
    Fine-tunes a question-answering model on SQuAD examples.

    :param model: A `*ForQuestionAnswering` model.
    :param tokenizer: Its fast tokenizer.
    :param examples: Labelled train examples (impossible ones learn the null position).
    :param config: The recipe.
    :param eval_examples: Labelled examples to score (official SQuAD v2 metrics) after each epoch, on rank 0.
    :param hooks: How the loop runs; `None` for `TrainHooks()` (this process, no checkpoints).
    :returns: The trained model and the loss curve.
    :raises ValueError: For an invalid config, no features, or a checkpoint written with another recipe.
    :raises qa_core.training.features.FeatureError: Naming examples that cannot be tokenized.
    """
    config.check()
    hooks = hooks or TrainHooks()
    rank, world_size = _rank_and_world_size()
    features = prepare_train_features(tokenizer, examples, config.tokenization)
    if len(features) < world_size:
        raise ValueError(f"{len(features)} train feature(s) cannot feed {world_size} workers.")
    lengths = [len(feature.sequence) for feature in features]
    steps_per_epoch = len(epoch_batches(lengths, config, 0, world_size))
    total_steps = config.epochs * steps_per_epoch
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)

    device = hooks.device()
    torch.manual_seed(config.seed + rank)  # dropout; restored from the checkpoint when resuming
    model = model.to(device)
    optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, linear_warmup_decay(math.ceil(config.warmup_ratio * total_steps), total_steps)
    )
    state = TrainState()
    with hooks.checkpoint_to_resume() as folder:
        if folder is not None:
            state = load_checkpoint(folder, model, optimizer, scheduler, config, rank)
            logger.info("Resuming from %s at step %d.", folder, state.global_step)
    running = hooks.prepare_model(model)
    collate = partial(collate_features, pad_token_id=tokenizer.pad_token_id)

    progress = tqdm(
        total=total_steps, initial=state.global_step, desc="train", disable=not config.progress or rank != 0
    )
    try:
        while state.epoch < config.epochs and state.global_step < total_steps:
            batches = epoch_batches(lengths, config, state.epoch, world_size)[state.step_in_epoch :]
            batches = batches[: total_steps - state.global_step]
            loader = torch.utils.data.DataLoader(
                features, batch_sampler=[batch[rank::world_size] for batch in batches], collate_fn=collate
            )
            for global_batch, batch in zip(batches, hooks.prepare_data_loader(loader), strict=True):
                loss = _step(running, batch, len(global_batch), world_size, optimizer, scheduler, config, device)
                state.losses.append(loss)
                state.global_step += 1
                state.step_in_epoch += 1
                progress.update(1)
                progress.set_postfix(loss=f"{loss:.4f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
            finished_epoch = state.step_in_epoch == steps_per_epoch
            name = f"epoch-{state.epoch + 1}" if finished_epoch else f"step-{state.global_step}"
            if finished_epoch:
                state.epoch, state.step_in_epoch = state.epoch + 1, 0
            metrics = _epoch_metrics(state, steps_per_epoch)
            if eval_examples and rank == 0:
                metrics.update(_evaluate(model, tokenizer, eval_examples, config, device))
            state.epochs.append(metrics)
            hooks.report(
                metrics,
                name,
                partial(
                    save_checkpoint,
                    model=model,
                    tokenizer=tokenizer,
                    optimizer=optimizer,
                    scheduler=scheduler,
                    state=state,
                    config=config,
                    rank=rank,
                ),
            )
    finally:
        progress.close()
    return TrainResult(model=model, losses=list(state.losses), epochs=list(state.epochs))


def train_loop_per_worker(config: dict[str, Any]) -> TrainResult:
    """
    `train` from files, callable as Ray Train's `train_loop_per_worker`: every value of `config` is plain.

    :param config: `model` (folder of the base model), `train_file` (SQuAD data), `train` (`TrainConfig` fields),
        and optionally `eval_file`, `checkpoint_dir`, `resume`, `device` (for the default hooks) or `hooks`
        (a `TrainHooks`, which replaces them).
    :returns: `train`'s result.
    """
    from qa_core.question_files import read_questions

    settings = TrainConfig(**config.get("train", {}))
    hooks = config.get("hooks") or TrainHooks(
        config.get("checkpoint_dir"), config.get("resume", False), config.get("device")
    )
    model, tokenizer = load_model(config["model"], seed=settings.seed)
    examples = read_questions(config["train_file"]).examples
    eval_examples = read_questions(config["eval_file"]).examples if config.get("eval_file") else None
    return train(model, tokenizer, examples, settings, eval_examples=eval_examples, hooks=hooks)


def epoch_batches(lengths: Seq[int], config: TrainConfig, epoch: int, world_size: int = 1) -> list[list[int]]:
    """
    The global batches of one epoch, as feature indices: a permutation drawn from `(seed, epoch)` cut into
    `batch_size` pieces; with `group_by_length`, each chunk of 64 batches is sorted by length (longest first) before
    the cut and the batches are shuffled after it. A last batch with fewer features than workers is dropped.

    :param lengths: Each feature's token count.
    :param config: `batch_size`, `seed`, `group_by_length`.
    :param epoch: The epoch, from 0.
    :param world_size: Workers sharing each batch.
    :returns: Lists of feature indices, in training order.
    """
    rng = np.random.default_rng([config.seed, epoch])
    order = rng.permutation(len(lengths))
    size = config.batch_size
    if config.group_by_length:
        chunk = size * _LENGTH_GROUP_BATCHES
        lengths = np.asarray(lengths)
        order = np.concatenate(
            [
                part[np.argsort(-lengths[part], kind="stable")]
                for part in np.split(order, range(chunk, len(order), chunk))
            ]
        )
    batches = [order[start : start + size].tolist() for start in range(0, len(order), size)]
    if config.group_by_length:
        batches = [batches[index] for index in rng.permutation(len(batches))]
    return [batch for batch in batches if len(batch) >= world_size]


def linear_warmup_decay(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The learning-rate factor of each step: up to 1 over `warmup_steps`, then down to 0 at `total_steps`, linearly."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def qa_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """
    Each feature's loss: the mean of the start and end cross-entropies over the positions an answer may take (the
    context's tokens, which inference decodes from, and the null position); padding and the question never
    compete, so a feature's loss does not depend on how much padding its batch has.

    :param start_logits: (batch, seq).
    :param end_logits: (batch, seq).
    :param batch: `context_mask` (batch, seq), `start_positions` and `end_positions` (batch,).
    :returns: (batch,) losses.
    """
    allowed = batch["context_mask"].clone()
    allowed[:, NULL_POSITION] = True
    lowest = torch.finfo(torch.float32).min
    start = start_logits.float().masked_fill(~allowed, lowest)  # (batch, seq)
    end = end_logits.float().masked_fill(~allowed, lowest)
    start_loss = F.cross_entropy(start, batch["start_positions"], reduction="none")
    end_loss = F.cross_entropy(end, batch["end_positions"], reduction="none")
    return (start_loss + end_loss) / 2


def save_checkpoint(
    folder: Path,
    *,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: TrainState,
    config: TrainConfig,
    rank: int,
) -> None:
    """
    Writes this worker's share of a checkpoint: its RNG state; on rank 0 also the model folder (safetensors weights,
    config, tokenizer), the optimizer and scheduler state and, last, `checkpoint.json`.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save(rng, folder / RNG_STATE.format(rank=rank))
    if rank != 0:
        return
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, folder / TRAINER_STATE)
    info = {
        "epoch": state.epoch,
        "step_in_epoch": state.step_in_epoch,
        "global_step": state.global_step,
        "losses": state.losses,
        "epochs": state.epochs,
        "world_size": _rank_and_world_size()[1],
        "config": config.as_dict(),
    }
    (folder / CHECKPOINT_INFO).write_text(json.dumps(info, indent=1), encoding="utf-8")


def load_checkpoint(
    folder: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: TrainConfig,
    rank: int = 0,
) -> TrainState:
    """
    Restores a checkpoint written by `save_checkpoint` into the model, optimizer and scheduler (and this worker's
    RNG when the checkpoint has its state). Nothing is unpickled: safetensors and `torch.load(weights_only=True)`.

    :returns: Where training stands.
    :raises ValueError: When the checkpoint was written with a recipe whose batches differ from `config`'s.
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    info = read_checkpoint_info(folder)
    differing = [name for name in _RESUME_FIELDS if info["config"].get(name) != getattr(config, name)]
    if differing:
        details = ", ".join(
            f"{name}={info['config'].get(name)!r} (now {getattr(config, name)!r})" for name in differing
        )
        raise ValueError(f"The checkpoint {folder} was written with {details}; resume with the same values.")
    device = next(model.parameters()).device
    model.load_state_dict(load_file(folder / "model.safetensors", device=str(device)))
    trainer_state = torch.load(folder / TRAINER_STATE, map_location=device, weights_only=True)
    optimizer.load_state_dict(trainer_state["optimizer"])
    scheduler.load_state_dict(trainer_state["scheduler"])
    rng_file = folder / RNG_STATE.format(rank=rank)
    if rng_file.is_file():
        rng = torch.load(rng_file, weights_only=True)
        torch.set_rng_state(rng["cpu"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
    else:
        logger.warning("%s has no RNG state for rank %d (it was written by fewer workers): reseeding.", folder, rank)
        torch.manual_seed(config.seed + rank + info["global_step"])
    return TrainState(
        info["epoch"], info["step_in_epoch"], info["global_step"], list(info["losses"]), list(info["epochs"])
    )


def _step(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    global_batch_size: int,
    world_size: int,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: TrainConfig,
    device: torch.device,
) -> float:
    """One optimizer step on this worker's share of a global batch; returns the global batch's mean loss."""
    batch = {name: tensor.to(device) for name, tensor in batch.items()}
    model.train()
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    local_sum = qa_loss(output.start_logits, output.end_logits, batch).sum()
    # DDP averages gradients over workers: scaled so, the average is the gradient of the global batch's mean loss.
    (local_sum * (world_size / global_batch_size)).backward()
    if config.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    total = local_sum.detach().reshape(1).double()
    if world_size > 1:
        torch.distributed.all_reduce(total)
    return total.item() / global_batch_size


def _epoch_metrics(state: TrainState, steps_per_epoch: int) -> dict[str, Any]:
    """What each worker reports after an epoch: where training stands and the epoch's mean loss."""
    taken = state.step_in_epoch or steps_per_epoch
    epoch_losses = state.losses[-taken:]
    return {
        "epoch": state.epoch if state.step_in_epoch == 0 else state.epoch + state.step_in_epoch / steps_per_epoch,
        "global_step": state.global_step,
        "loss": float(np.mean(epoch_losses)) if epoch_losses else float("nan"),
        "step_losses": list(epoch_losses),
    }


def _evaluate(model, tokenizer, examples: Seq[SquadExample], config: TrainConfig, device: torch.device) -> dict:
    from qa_core.training.predict import evaluate_model

    metrics = evaluate_model(
        model,
        tokenizer,
        examples,
        config.tokenization,
        batch_size=config.eval_batch_size,
        max_answer_length=config.eval_max_answer_length,
        device=device,
    )
    return {f"eval_{name}": value for name, value in metrics.items()}


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW's parameter groups: weight decay on weight matrices, none on biases and normalisation weights."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if parameter.ndim < 2 or "norm" in name.lower() else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _rank_and_world_size() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path)


__all__ = [
    "TrainConfig",
    "TrainHooks",
    "TrainResult",
    "TrainState",
    "epoch_batches",
    "latest_checkpoint",
    "linear_warmup_decay",
    "load_checkpoint",
    "load_model",
    "qa_loss",
    "read_checkpoint_info",
    "save_checkpoint",
    "train",
    "train_loop_per_worker",
]
