"""The reader stage, one instance per Ray actor: `sequence` rows -> `candidate` rows and a read note each."""

import os
import socket
from typing import Any

import pyarrow as pa

from jobs.bulk_qa.workers.rows import AGGREGATION_SCHEMA, candidate_row, read_note, sequence_from_row, table
from qa_core.inference import InferenceSettings
from qa_core.models import ModelSettings
from qa_core.secret import Secret
from qa_core.selection import SelectionSettings, candidate_answers


class ReadSequences:
    """
    Holds one warmed `ExtractiveReader` on the actor's GPU (or on the CPU) and reads the sequences of each batch
    in one forward-batched `predict` call.
    """

    def __init__(
        self,
        model: ModelSettings,
        inference: InferenceSettings,
        selection: SelectionSettings,
        token: Secret | None,
        cpu_threads: int | None = None,
        device: str | None = None,
    ) -> None:
        """
        :param device: Where the reader runs; None: the GPU Ray assigned to this actor, or the CPU without one.
        """
        import torch

        from qa_core.reader import ExtractiveReader

        gpu_ids: list[int] = []  # the GPUs Ray assigned to this actor
        if device is None:
            import ray

            gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
            device = "cuda:0" if gpu_ids and torch.cuda.is_available() else "cpu"
        if device == "cpu" and cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.reader = ExtractiveReader.from_settings(model, inference, device=device, token=token)
        self.reader.warm_up()
        self.context_window_size = selection.context_window_size
        gpus = ",".join(map(str, gpu_ids)) or "-"
        self.worker = f"{socket.gethostname()}:{os.getpid()} gpus={gpus} {device} {self.reader.precision_used}"

    def __call__(self, batch: pa.Table) -> pa.Table:
        """The batch's sequences -> their candidates and read notes."""
        sequence_rows = batch.to_pylist()
        out: list[dict[str, Any]] = []
        decoded = [sequence_from_row(row, index) for index, row in enumerate(sequence_rows)]
        spans = self.reader.predict([sequence for sequence, _ in decoded])
        for row, (_, window), sequence_spans in zip(sequence_rows, decoded, spans, strict=True):
            out.append(read_note(row, self.worker, sequence_spans))
            found = candidate_answers(row["query"], window, sequence_spans, self.context_window_size)
            out += [candidate_row(row, rank, answer) for rank, answer in enumerate(found)]
        return table(out, AGGREGATION_SCHEMA)


def worker_precision(worker: str) -> str:
    """The precision a reader actor ran in, from its label in the read notes (`host:pid gpus=... device precision`)."""
    return worker.rsplit(" ", 1)[-1]
