"""
Paths that every node of a Ray cluster must see the same. The job's tasks and actors read its inputs and write its
output folder on whichever node runs them, so a local path (not a URI) that only the driver's machine holds, or that
each node holds a different copy of, would fail mid-run or leave answers on a node's own disk.

`check_shared` probes each local path from every live node before any work starts, with one task pinned to each
node, all at once: a folder the job writes (`SharedPath.written`) by a token file the driver writes there and each
node must read back, and an input (which the driver may have no right to write into) by its `fingerprint`, which
each node must compute the same. Copies of an input on every node pass as long as they are the same files. The
bulk job checks again before each wave of work, on the nodes that joined since.
"""

import os
import time
import uuid
from dataclasses import dataclass

from jobs.path_probe import TOKEN_PREFIX, fingerprint, observe
from jobs.storage import InputError, redact

# How long the probes may take to answer: a node's probe waits only for a worker process to start there (its task
# reserves no CPU); a node that does not answer in time (lost, or overloaded) is left out of the check.
PROBE_TIMEOUT_S = 60.0


class NotShared(InputError):
    """A local path that is not the same on every node of the cluster (exit status 2, as for unusable input)."""


@dataclass(frozen=True)
class SharedPath:
    """A local path of the run that the cluster's tasks use, named by its option (`--output`)."""

    option: str
    path: str
    written: bool = False  # the job writes there: probed by a token file (else by the path's fingerprint)


def is_local(path: str) -> bool:
    """Whether a path is on a node's own filesystem (a plain path or `file://`), not in object storage."""
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    """The absolute local path of a plain path or a `file://` URI."""
    return os.path.abspath(path.removeprefix("file://"))


def model_folder(option: str, model: str | None) -> list[SharedPath]:
    """
    An option naming a model by its hub id or its local folder, as a path to check when it names a folder that
    exists here (a hub id is no path: each node loads it from its own cache).
    """
    if model and is_local(model) and os.path.exists(local_path(model)):
        return [SharedPath(option, model)]
    return []


def node_name(node: dict) -> str:
    """A node as messages name it: the start of its id and its address (`3f2a1b9c (10.0.0.5)`)."""
    return f"{node['NodeID'][:8]} ({node['NodeManagerAddress']})"


def check_shared(paths: list[SharedPath], program: str = "the job", probed: set[str] | None = None) -> float:
    """
    Checks that every local path of `paths` is the same on every live node with CPUs of the Ray cluster this
    process has joined (nothing to check on a cluster of one node, or without local paths). Each written folder is
    created if it does not exist, and its token file deleted after the check.

    :param probed: The ids of the nodes checked before, left out, and where the nodes checked now are added: a run
        calls it again before each wave of work, so that a node that joined since is checked before its next wave.

    :returns: The seconds the check took.
    :raises NotShared: For the first path that some node does not see as the driver does, naming the path, those
        nodes, and what to do.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    started = time.monotonic()
    local = [shared for shared in paths if is_local(shared.path)]
    if not local:
        return 0.0
    nodes = [node for node in ray.nodes() if node["Alive"]]
    if len(nodes) < 2:
        return 0.0
    # Every task and actor of the job reserves some CPU: a node without any (a head kept for scheduling) runs none.
    nodes = [node for node in nodes if node["Resources"].get("CPU", 0) > 0]
    nodes = [node for node in nodes if node["NodeID"] not in (probed or ())]
    if not nodes:
        return 0.0
    token = uuid.uuid4().hex
    tokens: list[str] = []  # the token files written, deleted after the check
    probes, expected = [], []
    try:
        for shared in local:
            path = local_path(shared.path)
            if shared.written:
                token_file = os.path.join(path, TOKEN_PREFIX + token)
                try:
                    os.makedirs(path, exist_ok=True)
                    with open(token_file, "w", encoding="utf-8") as file:
                        file.write(token)
                except OSError as error:
                    raise InputError(f"{shared.option} {redact(shared.path)}: cannot write there: {error}") from None
                tokens.append(token_file)
                probes.append((path, token))
                expected.append(token)
            else:
                probes.append((path, None))
                expected.append(fingerprint(path))
        probe = ray.remote(observe)
        pending = {
            probe.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                name="check_shared_paths",
            ).remote(probes): node
            for node in nodes
        }
        ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=PROBE_TIMEOUT_S)
        for ref in late:  # left out of the check (commit verification still covers the output folder)
            ray.cancel(ref, force=True)
        seen = {}
        for ref in ready:
            try:
                seen[pending[ref]["NodeID"]] = ray.get(ref)
            except ray.exceptions.RayError:  # a node lost meanwhile runs nothing of the job
                continue
    finally:
        for token_file in tokens:
            try:
                os.remove(token_file)
            except OSError:
                pass
    if probed is not None:
        probed.update(seen)  # a node that did not answer in time is probed again next time
    for index, shared in enumerate(local):
        blind = [node for node in nodes if node["NodeID"] in seen and seen[node["NodeID"]][index] != expected[index]]
        if blind:
            kind = "folder" if shared.written else "path"
            raise NotShared(
                f"{shared.option} {redact(shared.path)}: not the same {kind} on every node of the cluster: "
                f"{', '.join(node_name(node) for node in blind)} ({len(blind)} of {len(nodes)} "
                f"node{'s' if len(nodes) > 1 else ''} with CPUs) {'do' if len(blind) > 1 else 'does'} not see it "
                f"as the driver does, and {program}'s tasks "
                f"{'write' if shared.written else 'read'} it on whichever node runs them. Use object storage "
                "(s3://..., gs://...) or a shared mount that every node sees at this path."
            )
    return round(time.monotonic() - started, 3)
