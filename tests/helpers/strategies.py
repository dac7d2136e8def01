"""A strategy plugin's DDP subclass, as docs/plugins.rst ("A DDP strategy with a communication hook") shows it
(importable by spawned workers)."""

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from accelkit.records import load_target
from accelkit.strategies import DDPSpawnStrategy


class CommHookDDPSpawn(DDPSpawnStrategy):
    """``ddp_spawn`` whose gradients go through a DDP communication hook (``"module:function"``)."""

    def __init__(self, comm_hook: str = "torch.distributed.algorithms.ddp_comm_hooks.default_hooks:"
                                        "fp16_compress_hook", **options: Any) -> None:
        super().__init__(**options)  # the DistributedDataParallel options (find_unused_parameters...)
        self.comm_hook = comm_hook  # a string, so the strategy pickles to spawned workers

    def setup_module(self, module: nn.Module) -> nn.Module:
        wrapped = super().setup_module(module)
        if isinstance(wrapped, nn.parallel.DistributedDataParallel):  # only while fitting on several processes
            wrapped.register_comm_hook(None, load_target(self.comm_hook))
        return wrapped


def zero_gradients(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A communication hook that all-reduces nothing and hands back zero gradients (so training cannot move)."""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(torch.zeros_like(bucket.buffer()))
    return future
