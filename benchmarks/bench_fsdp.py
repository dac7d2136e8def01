"""``fsdp`` through the Trainer against a hand-written FSDP2 loop, two CPU processes (gloo); memory per rank
against DDP.

``steps``: ``Trainer(strategy=FSDPStrategy(auto_wrap_policy=[nn.Linear]), devices=2)`` (the module logs its loss
every step, the bar on rank 0) against a hand-written two-process loop started with ``torch.multiprocessing``:
``fully_shard`` on each ``nn.Linear`` then on the root, ``DistributedSampler``, the same model, data, batch size,
Adam and intra-op threads per process. Target <= 1.05x. As in bench_trainer.py: each measurement trains
``--epochs`` epochs, skips the first and keeps the fastest of the others, as seconds per step of rank 0; wall and
CPU clocks; the sides are interleaved with their order rotated every round; medians over rounds are reported.

``memory``: the bytes each rank holds for parameters, gradients and Adam's state (the local shards; measured
before and after every optimizer step of one epoch, peak kept) under ``fsdp`` and under ``ddp_spawn``.

    .venv/bin/python benchmarks/bench_fsdp.py [--rounds 7] [--epochs 4] [--width 256] [--only steps|memory]

On a small shared machine set ``OMP_NUM_THREADS=1`` (see bench_trainer.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trainer import (
    BATCH_SIZE,
    SAMPLES,
    BenchModule,
    EpochTimer,
    interleave,
    loop_epoch,
    make_data,
    output_to_devnull,
    quiet_trainer,
    report,
    steady,
)

import accelkit


def shard(model: nn.Module, world: int) -> nn.Module:
    """FSDP2 by hand: every ``nn.Linear`` its own unit, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for sub in list(model.modules()):
        if isinstance(sub, nn.Linear):
            fully_shard(sub, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _loop_fsdp_worker(rank: int, world: int, port: int, width: int, epochs: int, path: str) -> None:
    """One rank of the hand-written FSDP2 loop (rank 0 writes its epoch times to ``path``)."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    if "OMP_NUM_THREADS" not in os.environ:  # the thread count accelkit gives its spawned workers
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        dataset = make_data()
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
        torch.manual_seed(0)
        model = shard(BenchModule(width, log=False), world)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model.train()
        times = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            times.append(loop_epoch(model, optimizer, loader))
        if rank == 0:
            Path(path).write_text(json.dumps({"times": times, "steps": len(loader)}))
    finally:
        dist.destroy_process_group()


def loop_fsdp(width: int, epochs: int, world: int = 2) -> tuple[float, float]:
    """Seconds per step of rank 0 of the hand-written FSDP2 loop."""
    import torch.multiprocessing as mp

    from accelkit.strategies.ddp import find_free_port

    with tempfile.TemporaryDirectory(prefix="bench-fsdp-") as tmp:
        path = os.path.join(tmp, "times.json")
        with output_to_devnull():
            mp.start_processes(_loop_fsdp_worker, args=(world, find_free_port(), width, epochs, path), nprocs=world,
                               join=True, start_method="spawn")
        result = json.loads(Path(path).read_text())
    return steady(result["times"], result["steps"])


def fsdp_strategy() -> Any:
    """The Trainer side's strategy: the same units as the hand-written loop."""
    from accelkit_fsdp import FSDPStrategy

    return FSDPStrategy(auto_wrap_policy=[nn.Linear])


def trainer_fsdp(width: int, epochs: int, world: int = 2) -> tuple[float, float]:
    """Seconds per step of rank 0 of the Trainer with ``fsdp`` (bar + log)."""
    loader = DataLoader(make_data(), batch_size=BATCH_SIZE, shuffle=True)
    with tempfile.TemporaryDirectory(prefix="bench-fsdp-") as tmp:
        path = os.path.join(tmp, "times.json")
        trainer = quiet_trainer(epochs, [EpochTimer(path)], devices=world, strategy=fsdp_strategy())
        torch.manual_seed(0)
        with output_to_devnull():
            trainer.fit(BenchModule(width, log=True), train_dataloaders=loader)
        result = json.loads(Path(path).read_text())
    return steady(result["times"], result["steps"])


# ------------------------------------------------------------------------------------------ memory
def _local_bytes(tensor: Any) -> int:
    if tensor is None:
        return 0
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


class MemoryProbe(accelkit.Callback):
    """Peak bytes this rank holds for parameters, gradients and optimizer state; every rank writes its own."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.peak = {"params": 0, "grads": 0, "optimizer": 0}

    def _measure(self, module: Any, optimizer: Any) -> None:
        sizes = {"params": sum(_local_bytes(p) for p in module.parameters()),
                 "grads": sum(_local_bytes(p.grad) for p in module.parameters()),
                 "optimizer": sum(_local_bytes(t) for s in optimizer.state.values() for t in s.values()
                                  if isinstance(t, torch.Tensor) and t.dim() > 0)}
        for key, value in sizes.items():
            self.peak[key] = max(self.peak[key], value)

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self._measure(module, optimizer)

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._measure(module, trainer.optimizers[0])

    def on_train_end(self, trainer: Any, module: Any) -> None:
        Path(self.folder, f"rank{trainer.global_rank}.json").write_text(json.dumps(self.peak))


def memory(strategy: Any, width: int, world: int = 2) -> list[dict[str, int]]:
    """Each rank's peak parameter/gradient/optimizer bytes over one epoch under ``strategy``."""
    loader = DataLoader(make_data(), batch_size=BATCH_SIZE, shuffle=True)
    with tempfile.TemporaryDirectory(prefix="bench-fsdp-mem-") as tmp:
        trainer = quiet_trainer(1, [MemoryProbe(tmp)], devices=world, strategy=strategy)
        torch.manual_seed(0)
        with output_to_devnull():
            trainer.fit(BenchModule(width, log=False), train_dataloaders=loader)
        return [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    """Parse the arguments and run the chosen comparisons."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per measurement (the first is warm-up)")
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    parser.add_argument("--only", choices=("steps", "memory"), default=None, help="run one comparison only")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first is warm-up)")
    warnings.simplefilter("ignore")  # plugin-discovery warnings of unrelated, uninstalled plugins
    print(f"torch {torch.__version__}, accelkit {accelkit.__version__}, {os.cpu_count()} cores; MLP width "
          f"{args.width}, batch {BATCH_SIZE} per rank, {SAMPLES} samples, 2 processes (gloo); fastest of "
          f"{args.epochs - 1} epochs after a warm-up one, {args.rounds} rounds, order rotated each round", flush=True)
    if args.only in (None, "steps"):
        print("rank 0's time per step:", flush=True)
        results = interleave({
            "fsdp loop": lambda: loop_fsdp(args.width, args.epochs),
            "fsdp": lambda: trainer_fsdp(args.width, args.epochs),
        }, args.rounds)
        report(results, "fsdp loop", {"fsdp": 1.05})
    if args.only in (None, "memory"):
        print("bytes per rank (parameters + gradients + Adam state, local shards, peak over one epoch):", flush=True)
        sharded, replicated = memory(fsdp_strategy(), args.width), memory("ddp_spawn", args.width)
        for name, ranks in (("fsdp", sharded), ("ddp_spawn", replicated)):
            for rank, peak in enumerate(ranks):
                print(f"  {name:<9} rank {rank}: params {peak['params']:>8}  grads {peak['grads']:>8}  optimizer "
                      f"{peak['optimizer']:>8}  total {sum(peak.values()):>8}")
        worst = max(sum(p.values()) for p in sharded)
        print(f"  fsdp/ddp_spawn per rank (largest rank): {worst / sum(replicated[0].values()):.3f}  (1/N = 0.500)")


if __name__ == "__main__":
    main()
