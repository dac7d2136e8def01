"""Fabric scenarios on several real XLA replicas (PJRT_DEVICE=CPU, ``CPU_NUM_DEVICES`` devices), each in a process
of its own: ``python fabric_scenarios.py NAME OUTDIR`` writes ``OUTDIR/result.json`` (and each replica
``OUTDIR/rankR.json``); ``test_fabric_xla_spawn.py`` asserts on them.

The cross-replica collective is ``FlatBufferAllReduceSpawn`` of ``xla_scenarios.py`` (a test-side substitute for
``xm.all_reduce``, which aborts in XLA's rendezvous on the CPU: see that class); everything else (the Fabric, the
launcher, ``torch_xla.launch``, the replicas' ranks and devices, the sharded loader, the step) is the production
code.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from scenario_main import run_scenario_main
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from xla_scenarios import FlatBufferAllReduceSpawn

from accelkit import Fabric

SAMPLES, BATCH, LR, EPOCHS = 32, 4, 0.1, 2


def dataset() -> TensorDataset:
    """``(x, y, index)``: a replica reports which samples it read."""
    gen = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(SAMPLES, 8, generator=gen), torch.randn(SAMPLES, 1, generator=gen),
                         torch.arange(SAMPLES))


def build() -> nn.Module:
    """The same initial weights in every replica, from a generator of its own: on the CPU the replicas are threads
    of one process sharing torch's global generator, so seeding it in each replica races with the others (measured:
    replicas that started with different weights and, averaging equal gradients, ended different)."""
    model = nn.Linear(8, 1)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(0.3 * torch.randn(param.shape, generator=gen))
    return model


def train(fabric: Fabric, out: str) -> dict:
    """The user's loop, run in every replica by ``fabric.launch(train, out)``; writes ``rankR.json``."""
    import torch_xla.runtime as xr

    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH))
    seen: list[int] = []
    for _ in range(EPOCHS):
        for x, y, index in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            seen.extend(int(i) for i in index.cpu())
    rank = fabric.global_rank
    weights = {k: v.detach().cpu().tolist() for k, v in model.state_dict().items()}
    info = {"global_rank": rank, "world_size": fabric.world_size, "local_rank": fabric.local_rank,
            "runtime_ordinal": xr.global_ordinal(), "device": str(fabric.device), "seen": seen, "weights": weights,
            "pid": os.getpid(), "strategy": type(fabric.strategy).__name__}
    Path(out, f"rank{rank}.json").write_text(json.dumps(info))
    return {"rank": rank, "weights": weights}


def reference() -> dict:
    """Plain torch on the CPU with the whole global batch (every replica's batch) per step."""
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    world = int(os.environ["CPU_NUM_DEVICES"])
    for _ in range(EPOCHS):
        for x, y, _ in DataLoader(dataset(), batch_size=BATCH * world):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return {k: v.detach().tolist() for k, v in model.state_dict().items()}


def scenario_launch(out: Path) -> dict:
    """``Fabric(accelerator="tpu", devices=N, strategy=<xla_spawn>)`` + ``fabric.launch(train, out)``."""
    world = int(os.environ["CPU_NUM_DEVICES"])
    by_name = Fabric(accelerator="tpu", devices=world, strategy="xla_spawn")  # what a TPU user writes
    fabric = Fabric(accelerator="tpu", devices=world, strategy=FlatBufferAllReduceSpawn())
    parent_imported_xla = "torch_xla" in sys.modules
    returned = fabric.launch(train, str(out))
    return {"by_name": type(by_name.strategy).__name__, "by_name_world": by_name.world_size,
            "parent_imported_xla_before_launch": parent_imported_xla, "returned": returned,
            "reference": reference(), "initial": {k: v.tolist() for k, v in build().state_dict().items()}}


def scenario_stock(out: Path) -> dict:
    """``strategy="xla_spawn"`` as shipped (``xm.all_reduce``) with ``launch(train, out)`` on CPU replicas: what the
    launching process is told when XLA's rendezvous aborts the replicas' process."""
    from accelkit.errors import WorkerError

    fabric = Fabric(accelerator="xla", devices=int(os.environ["CPU_NUM_DEVICES"]), strategy="xla_spawn")
    try:
        fabric.launch(train, str(out))
    except WorkerError as exc:
        return {"error": str(exc)}
    return {"error": None}


SCENARIOS = {"launch": scenario_launch, "stock": scenario_stock}

if __name__ == "__main__":
    run_scenario_main(SCENARIOS)
