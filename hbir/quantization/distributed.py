"""Observers under ``torch.distributed``: one calibration over every rank's data.

When the default process group is initialised with more than one rank, every
observer step all-reduces its batch statistics before it updates: the min and max
of the batch (an elementwise MIN / MAX, per channel alike), and a histogram
observer's range and batch histogram (its range grows to the largest ``|x|`` of any
rank, then the ranks' histograms of the batch are summed). So every rank holds the
same observer state, and it is the state one process reaches from the batches of
all ranks concatenated step by step: exact for min/max and histograms (the
reductions are exact in float64); a moving average moves towards the min / max of
that concatenated batch. Fixed-scale observers observe nothing and reduce nothing.
Without a process group (or with one rank) nothing happens and nothing is spent.

The steps must run on every rank in the same order (the same prepared model, the
same number of calibration batches): every observer step is a collective. Each
step also checks that the observer has the same history on every rank (seen data
or not, the same histogram range), so a model whose calibration started on some
ranks only is an :class:`ObserverStateError`, not a silently different scale.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hbir.errors import HbirError


class ObserverStateError(HbirError):
    """An observer whose state differs between the ranks of a process group."""


def active() -> bool:
    """A process group with more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def reduce_extremes(
    batch_min: torch.Tensor,
    batch_max: torch.Tensor,
    state: list[float],
    what: str,
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """The MIN of ``batch_min`` and the MAX of ``batch_max`` over the ranks, and
    the MAX of ``state`` (numbers every rank must agree on), in one collective;
    raises :class:`ObserverStateError` where ``state`` differs between ranks."""
    shape, n = batch_min.shape, batch_min.numel()
    numbers = torch.tensor(state, dtype=torch.float64)
    packed = torch.cat(
        [
            -batch_min.detach().double().reshape(-1),
            batch_max.detach().double().reshape(-1),
            numbers,
            -numbers,
        ]
    )
    dist.all_reduce(packed, op=dist.ReduceOp.MAX)
    k = len(state)
    highest, lowest = packed[2 * n : 2 * n + k], -packed[2 * n + k :]
    if not torch.equal(highest, lowest):
        raise ObserverStateError(
            f"{what} is in different states on the ranks of the process group "
            f"(from {lowest.tolist()} to {highest.tolist()}): calibration must run "
            "on every rank from the same prepared model, with the same number of "
            "batches (wrap and start it on all ranks, or on none)"
        )
    low = (-packed[:n]).reshape(shape).to(batch_min.dtype)
    high = packed[n : 2 * n].reshape(shape).to(batch_max.dtype)
    return low, high, highest.tolist()


def reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over the ranks (float64: exact for counts)."""
    total = t.detach().double().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.to(t.dtype)
