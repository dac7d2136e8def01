"""Programs run as scripts by tests/test_fabric_processes.py: ``python fabric_runs.py SCENARIO STRATEGY DEVICES OUT``.

``train``: a short data-parallel fit through Fabric (sharded, shuffled loader; accumulation under
``no_backward_sync``); global rank 0 writes what every rank saw to ``OUT`` (JSON). ``spawn``: ``launch(function)``,
whose return value (global rank 0's) the caller writes. ``dead_rank``: rank 1 exits with code 3 after launching,
rank 0 waits in a barrier. ``rank_zero_save``: only rank 0 calls ``save`` (a collective), rank 1 works on.
``batch_sampler``: two epochs over a loader built with ``batch_sampler=BatchSampler(RandomSampler(data), 8, False)``;
each rank writes the sample indices and batch sizes it read to ``OUT.<rank>`` (JSON). ``SCENARIO`` may name
several, comma-separated (``train,evaluate``): they run one after the other in the same launched processes (one
launch read by several tests), each with ``OUT.<scenario>`` for ``OUT``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

from accelkit import Fabric


def train(fabric: Fabric, out: str) -> dict:
    fabric.seed_everything(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=2, shuffle=True))
    seen = []
    for _epoch in range(2):
        for i, (x, y) in enumerate(loader):
            seen.append(x[:, 0].tolist())
            accumulating = i % 2 == 0
            with fabric.no_backward_sync(model, enabled=accumulating):
                fabric.backward(nn.functional.mse_loss(model(x), y))
            if accumulating:  # each rank's own gradient, not yet averaged
                local = model.weight.grad.detach().clone()
                gathered = fabric.all_gather(local)
                unsynced = not torch.allclose(gathered[0], gathered[1])
            else:
                optimizer.step()
                optimizer.zero_grad()
    weights = fabric.all_gather(model.weight.detach())
    result = {"world_size": fabric.world_size, "ranks_agree": bool(torch.allclose(weights[0], weights[1])),
              "gathered_shape": list(weights.shape), "unsynced_during_accumulation": unsynced,
              "batches": len(loader), "seen": fabric.all_gather(torch.tensor(seen)).tolist(),
              "mean_rank": fabric.all_reduce(float(fabric.global_rank)).item(),
              "sum_rank": fabric.all_reduce(torch.tensor(float(fabric.global_rank)), reduce_op="sum").item(),
              "broadcast": fabric.broadcast(os.getpid()), "pid": os.getpid(), "weight": weights[0].tolist()}
    if fabric.is_global_zero and out:
        with open(out, "w") as f:
            json.dump(result, f)
    return result


def batch_sampler(fabric: Fabric, out: str) -> None:
    """Two epochs of steps over 20 indexed samples read through a user's ``batch_sampler=`` (batches of 8); each
    rank writes ``{"epochs": [[index, ...], ...], "sizes": [[batch size, ...], ...]}`` to ``<out>.<rank>``."""
    fabric.seed_everything(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 1, generator=g), torch.arange(20))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), 8, False)))
    epochs: list[list[int]] = []
    sizes: list[list[int]] = []
    for epoch in range(2):
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        epochs.append([])
        sizes.append([])
        for x, y, index in loader:
            epochs[-1].extend(int(i) for i in index)
            sizes[-1].append(len(index))
            fabric.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    with open(f"{out}.{fabric.global_rank}", "w") as f:
        json.dump({"epochs": epochs, "sizes": sizes, "world_size": fabric.world_size}, f)


def fsdp_checkpoint(fabric: Fabric, out: str) -> None:
    """Two clipped steps under FSDP, the norm compared with the full gradients' own; a sharded save; rank 0 writes
    the full weights and norms to ``out`` (JSON)."""
    fabric.seed_everything(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    g = torch.Generator().manual_seed(fabric.global_rank)
    norms = []
    for _ in range(2):
        x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
        fabric.backward(nn.functional.mse_loss(model(x), y))
        full_grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad for p in model.parameters()]
        expected = torch.linalg.vector_norm(torch.cat([g.flatten() for g in full_grads]))
        norm = fabric.clip_gradients(model, optimizer, max_norm=0.5)
        norms.append((float(norm), float(expected)))
        optimizer.step()
        optimizer.zero_grad()
    fabric.save(out + ".ckpt", {"model": model, "optimizer": optimizer, "step": 2})
    weights = {k: v.tolist() for k, v in model.state_dict().items()}
    if fabric.is_global_zero:
        with open(out, "w") as f:
            json.dump({"norms": norms, "weights": weights}, f)


def fsdp_load(fabric: Fabric, out: str) -> None:
    """Load the checkpoint ``fsdp_checkpoint`` saved (at another world size) into a fresh sharded model and
    optimizer; write the restored full weights and step to ``out`` (JSON)."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    state = {"model": model, "optimizer": optimizer, "step": 0}
    rest = fabric.load(out.removesuffix(".loaded") + ".ckpt", state)
    weights = {k: v.tolist() for k, v in model.state_dict().items()}
    steps = sorted({int(s["step"]) for s in optimizer.state_dict()["state"].values()})
    if fabric.is_global_zero:
        with open(out, "w") as f:
            json.dump({"weights": weights, "step": state["step"], "rest": sorted(rest), "adam_steps": steps}, f)


def fsdp_empty_init(fabric: Fabric, out: str) -> None:
    """A module made under ``init_module(empty_init=True)`` (on the meta device until ``setup`` shards it) and one
    made normally, both after ``seed_everything(0)``: rank 0 writes whether the first was on the meta device, both
    full weights, the bytes each rank's shards take, and the loss of one step on the materialised one (JSON)."""
    def build() -> nn.Module:
        return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 3))

    fabric.seed_everything(0, verbose=False)
    reference = {k: v.tolist() for k, v in build().state_dict().items()}
    fabric.seed_everything(0, verbose=False)
    with fabric.init_module(empty_init=True):
        model = build()
    on_meta = all(p.is_meta for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    local_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    weights = {k: v.tolist() for k, v in model.state_dict().items()}
    loss = nn.functional.mse_loss(model(torch.randn(4, 6)), torch.zeros(4, 3))
    fabric.backward(loss)
    optimizer.step()
    if fabric.is_global_zero:
        with open(out, "w") as f:
            json.dump({"on_meta": on_meta, "reference": reference, "weights": weights, "loss": loss.item(),
                       "local_bytes": local_bytes}, f)


def evaluate(fabric: Fabric, out: str) -> None:
    """15 samples over 2 processes (the sampler repeats one): what gather_for_metrics returns over the epoch, and
    a fit under accumulate(every=2) whose ranks must agree; rank 0 writes both to ``out`` (JSON)."""
    data = TensorDataset(torch.arange(15.0).unsqueeze(1), torch.ones(15, 1))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=4))
    seen, plain = [], []
    for x, _ in loader:
        seen += fabric.gather_for_metrics(x[:, 0]).tolist()
        plain += fabric.all_gather(x[:, 0]).flatten().tolist()
    model = nn.Linear(1, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    for x, y in loader:
        with fabric.accumulate(model, every=2):
            fabric.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    weights = fabric.all_gather(model.weight.detach())
    if fabric.is_global_zero:
        with open(out, "w") as f:
            json.dump({"seen": seen, "plain": plain, "agree": bool(torch.equal(weights[0], weights[1]))}, f)


def one_device(fabric: Fabric, out: str) -> None:
    """A seeded fit on one device (the CPU, or an XLA device): ``out`` gets the device and the trained weights."""
    fabric.seed_everything(0)
    model = nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g))
    for x, y in fabric.setup_dataloaders(DataLoader(data, batch_size=4)):
        fabric.backward(nn.functional.mse_loss(model(x), y))
        fabric.clip_gradients(model, optimizer, max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
    with open(out, "w") as f:
        json.dump({"device": str(fabric.device), "weight": model.weight.detach().cpu().tolist()}, f)

#: the collective timeout of ``ddp-short-timeout``
SHORT_TIMEOUT_S = 15


def main() -> None:
    scenario, strategy, devices, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if strategy == "ddp-short-timeout":  # the watchdog speaks after max(10 s, a tenth of the timeout): 5 s before
        from accelkit.strategies import DDPStrategy  # the collective fails (its reading of the store included)

        strategy = DDPStrategy(timeout_s=SHORT_TIMEOUT_S)
    accelerator = os.environ.get("FABRIC_RUNS_ACCELERATOR", "cpu")
    fabric = Fabric(accelerator=accelerator, devices=devices, strategy=strategy)
    if scenario == "spawn":
        result = fabric.launch(train, "")
        with open(out, "w") as f:
            json.dump({**result, "caller_pid": os.getpid()}, f)
        return
    fabric.launch()
    names = scenario.split(",")
    for name in names:  # several: one after the other in the same processes, each writing to OUT.<name>
        run_scenario(fabric, name, out if len(names) == 1 else f"{out}.{name}")


def run_scenario(fabric: Fabric, scenario: str, out: str) -> None:
    """Run ``scenario`` in this (launched) process."""
    if scenario == "train":
        train(fabric, out)
    elif scenario == "batch_sampler":
        batch_sampler(fabric, out)
    elif scenario == "one_device":
        one_device(fabric, out)
    elif scenario == "evaluate":
        evaluate(fabric, out)
    elif scenario == "fsdp_checkpoint":
        fsdp_checkpoint(fabric, out)
    elif scenario == "fsdp_empty_init":
        fsdp_empty_init(fabric, out)
    elif scenario == "fsdp_load":
        fsdp_load(fabric, out)
    elif scenario == "dead_rank":
        if fabric.global_rank == 1:
            os._exit(3)
        fabric.barrier("after the exit")
        time.sleep(120)
    elif scenario == "stopped_rank":
        with open(f"{out}.{fabric.global_rank}", "w") as f:
            f.write(str(os.getpid()))
        if fabric.global_rank == 1:
            time.sleep(3)  # its watchdog reports first
            os.kill(os.getpid(), signal.SIGSTOP)
        fabric.barrier("after the stop")
    elif scenario == "rank_zero_save":
        if fabric.global_rank == 0:
            fabric.save(out, {"step": 1})
        else:
            time.sleep(SHORT_TIMEOUT_S + 5)  # working (not in a collective) until rank 0's barrier has failed
    elif scenario == "sleep":
        with open(f"{out}.{fabric.global_rank}", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(300)


if __name__ == "__main__":
    main()
