"""
The training loop data-parallel on Ray Train: `qa_core.training.loop.train_loop_per_worker` as `TorchTrainer`'s
`train_loop_per_worker`, with hooks that use `ray.train.torch.prepare_model` (DDP), `prepare_data_loader` (batches to
the worker's device; the loop shards each global batch itself, so no `DistributedSampler`) and `ray.train.report`
(every worker reports once per epoch; rank 0's checkpoint holds the model, each worker's its RNG state, and Ray
merges them into `DIR/checkpoints/epoch-N`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch

from qa_core.training.loop import CHECKPOINT_INFO, TrainHooks, latest_checkpoint, train_loop_per_worker


class RayTrainHooks(TrainHooks):
    """
    The loop's hooks inside a Ray Train worker.

    :param resume_from: A checkpoint folder to resume from when Ray Train has none of its own (a run restored by Ray
        resumes from Ray's latest checkpoint).
    """

    def __init__(self, resume_from: str | None = None) -> None:
        super().__init__()
        self.resume_from = resume_from

    def device(self) -> torch.device:
        return ray.train.torch.get_device()

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return ray.train.torch.prepare_model(model)

    def prepare_data_loader(self, loader: torch.utils.data.DataLoader) -> Any:
        return ray.train.torch.prepare_data_loader(loader, add_dist_sampler=False)

    @contextlib.contextmanager
    def checkpoint_to_resume(self) -> Iterator[Path | None]:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                yield Path(folder)
        else:
            yield None if self.resume_from is None else Path(self.resume_from)

    def report(self, metrics: dict[str, Any], name: str, write_checkpoint: Callable[[Path], None]) -> None:
        with tempfile.TemporaryDirectory(prefix="qa-train-") as folder:
            write_checkpoint(Path(folder))
            checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=name)


def ray_train_loop(config: dict[str, Any]) -> None:
    """`TorchTrainer`'s `train_loop_per_worker`: the loop with Ray Train's hooks (`config`: see `run_ray_training`)."""
    run = {key: value for key, value in config.items() if key not in ("checkpoint_dir", "resume", "device")}
    run["hooks"] = RayTrainHooks(config.get("resume_from"))
    train_loop_per_worker(run)


def run_ray_training(
    run: dict[str, Any], checkpoints: Path, num_workers: int, use_gpu: bool = False, address: str | None = None
) -> Path | None:
    """
    Runs the loop on `num_workers` Ray Train workers, checkpointing into `checkpoints/` (`epoch-N/`).

    Uses the Ray this process is connected to; else joins the cluster at `address`, or at `RAY_ADDRESS` (as
    `ray job submit` sets it); else starts a Ray of its own on this machine (`address="local"`, `num_cpus=max(2,
    num_workers)`, no dashboard), even when someone else's runs here. It shuts down only a Ray it connected.

    :param run: `train_loop_per_worker`'s config (plain values), plus `resume_from`.
    :param checkpoints: The checkpoint folder (Ray Train's run folder: storage path and name).
    :param num_workers: Data-parallel workers.
    :param use_gpu: One GPU per worker (NCCL); otherwise CPU workers (gloo).
    :param address: A cluster to join (`auto`, `HOST:PORT`); `None` for `RAY_ADDRESS` or a local Ray.
    :returns: The last checkpoint's folder.
    :raises ray.train.TrainingFailedError: When training fails.
    """
    started = False
    if not ray.is_initialized():
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        if target == "local":
            ray.init(address="local", num_cpus=max(2, num_workers), include_dashboard=False)
        else:
            print(f"Joining the Ray cluster at {target}.", file=sys.stderr)
            ray.init(address=target)
        started = True
    try:
        trainer = ray.train.torch.TorchTrainer(
            ray_train_loop,
            train_loop_config=run,
            torch_config=ray.train.torch.TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ray.train.ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
            run_config=ray.train.RunConfig(name=checkpoints.name, storage_path=str(checkpoints.parent)),
        )
        result = trainer.fit()
    finally:
        if started:
            ray.shutdown()
    if result.checkpoint is not None and (Path(result.checkpoint.path) / CHECKPOINT_INFO).is_file():
        return Path(result.checkpoint.path)
    return latest_checkpoint(checkpoints)
