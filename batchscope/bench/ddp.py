"""Data-parallel runs: a grid point on N devices, one process per device, started by torchrun.

torchrun (``python -m torch.distributed.run``) starts the N processes and gives each its
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and rendezvous in the environment; this module joins
them into a process group (NCCL on CUDA, gloo on the CPU), and gives the run what it needs
around the single-device code: the rank's device, a ``DistributedSampler`` per loader, the
agreement on when the loop ends, the noise scale's all-reduce and the gathering of every
rank's measurement on rank 0, which alone writes the result.

Control traffic (the loop's end, the gathered measurements) goes over a second, gloo group on
the host, so that a CUDA run never synchronises the device for it.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

#: How long a rank waits for the others in a collective before it fails (torch's default is
#: 30 minutes; a rank that died is noticed by torchrun long before that).
TIMEOUT = datetime.timedelta(minutes=10)


@dataclass
class Group:
    """This process's place in a data-parallel run."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    #: the gloo group on the host that control messages go through
    host: object = None

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def agree(self, done: bool) -> bool:
        """True on every rank when any rank is done: the ranks step together, so that none
        waits in an all-reduce for a rank that has left the loop."""
        flag = torch.tensor([int(done)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.host)
        return bool(flag.item())

    def gather(self, value) -> list:
        """Every rank's ``value`` (any picklable), in rank order, on every rank."""
        values = [None] * self.world_size
        dist.all_gather_object(values, value, group=self.host)
        return values

    def mean_(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Average ``tensors`` over the ranks, in place (on the tensors' device's backend)."""
        for tensor in tensors:
            dist.all_reduce(tensor)
            tensor /= self.world_size
        return tensors


#: Test hook: ``RANK:STEP`` makes that rank run out of memory at that step (1-based, as the
#: steps CSV counts), before the step's work, as a CUDA allocator would: its peers go on into
#: the step's all-reduce, which it never joins.
OOM_AT_ENV = "BATCHSCOPE_OOM_AT"


def injected_oom(step_fn, rank: int):
    """``step_fn``, or with :data:`OOM_AT_ENV` naming this rank, a step function that raises
    ``torch.OutOfMemoryError`` at the step it names."""
    where = os.environ.get(OOM_AT_ENV, "")
    oom_rank, _, oom_step = where.partition(":")
    if oom_rank != str(rank):
        return step_fn
    count = 0

    def step(x, y, clock):
        nonlocal count
        count += 1
        if count == int(oom_step):
            raise torch.OutOfMemoryError(f"{OOM_AT_ENV}: rank {rank} out of memory (injected)")
        return step_fn(x, y, clock)

    return step


def from_environment() -> tuple[int, int, int, int]:
    """(rank, world size, local rank, local world size) as torchrun sets them; one process
    without it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    return (
        int(os.environ.get("RANK", "0")),
        world,
        int(os.environ.get("LOCAL_RANK", "0")),
        local_world,
    )


def start(device: torch.device) -> tuple[Group, torch.device]:
    """Join the process group torchrun set up; returns the group and this rank's device
    (``cuda:<local rank>`` on CUDA)."""
    rank, world, local_rank, local_world = from_environment()
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=TIMEOUT)
    host = dist.new_group(backend="gloo") if backend != "gloo" else None
    return Group(rank, world, local_rank, local_world, host), device


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def sampler(dataset, group: Group | None, *, shuffle: bool, seed: int):
    """Each rank's share of ``dataset`` (the same number of samples on every rank), or None
    for a single-device run."""
    if group is None:
        return None
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(
        dataset,
        num_replicas=group.world_size,
        rank=group.rank,
        shuffle=shuffle,
        seed=seed,
        drop_last=True,
    )


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The model under DDP: gradients all-reduced in the backward pass (rank 0's parameters
    broadcast first, so every rank starts from the same model)."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


#: What rank 0's result takes from every rank: throughput, data wait and memory.
GATHERED = ("samples_per_s", "data_wait_frac", "peak_mem_mb", "status", "error")


def combine(outcome: dict, ranks: list[dict], group: Group) -> dict:
    """Rank 0's result fields from every rank's measurement: the throughput of the whole run
    (the ranks' sum: each steps its own share of every global batch), each rank's own, the
    slowest rank's data wait and the largest rank's peak memory."""
    rates = [r["samples_per_s"] for r in ranks]
    waits = [r["data_wait_frac"] for r in ranks if r["data_wait_frac"] is not None]
    peaks = [r["peak_mem_mb"] for r in ranks if r["peak_mem_mb"] is not None]
    combined = {
        "world_size": group.world_size,
        "samples_per_s_per_rank": rates,
        "data_wait_frac": max(waits) if waits else None,
        "peak_mem_mb": max(peaks) if peaks else None,
    }
    if all(rate is not None for rate in rates):
        scale = sum(rates) / rates[0] if rates[0] else float(group.world_size)
        combined["samples_per_s"] = sum(rates)
        # rank 0's windows and spread, scaled to the whole run's throughput
        if outcome.get("samples_per_s_iqr") is not None:
            combined["samples_per_s_iqr"] = outcome["samples_per_s_iqr"] * scale
        if outcome.get("samples_per_s_windows"):
            combined["samples_per_s_windows"] = [
                w * scale for w in outcome["samples_per_s_windows"]
            ]
    return combined
