"""Scenarios run on real XLA (PJRT_DEVICE=CPU) in a process of its own: ``python xla_scenarios.py NAME OUTDIR``.

Each scenario writes ``OUTDIR/result.json`` with what it measured; the pytest module asserts on it. They run in
subprocesses because an XLA runtime started in the pytest process would break every later spawn.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
from scenario_main import run_scenario_main
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import accelkit
from accelkit import Callback, Module, Trainer


def _data(n: int = 64, features: int = 8, seed: int = 0) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=gen)
    w = torch.randn(features, 1, generator=gen)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=gen))


class Regression(Module):
    """A linear regression trained with SGD and a mean squared error."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.layer = nn.Linear(8, 1)
        self.lr = lr

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch[0], batch[1]
        loss = nn.functional.mse_loss(self(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class TaggedData(Dataset):
    """Samples ``(x, y, name)``: the name is a string that must reach training_step untouched."""

    def __init__(self) -> None:
        self.inner = _data()

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return x, y, f"sample-{i}"


class TaggedRegression(Regression):
    """Checks each batch: tensors on the XLA device, the string names untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def training_step(self, batch, batch_idx):
        x, y, names = batch
        self.seen.append((x.device.type, type(names).__name__, list(names)))
        return super().training_step((x, y), batch_idx)


class WeightSharingModule(Module):
    """The Lightning TPU guide's example: layer_3 shares layer_1's weight, re-tied after the move."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.layer_1 = nn.Linear(8, 8, bias=False)
        self.layer_2 = nn.Linear(8, 8, bias=False)
        self.layer_3 = nn.Linear(8, 8, bias=False)
        self.layer_3.weight = self.layer_1.weight

    def forward(self, x):
        return self.layer_3(torch.relu(self.layer_2(self.layer_1(x))))

    def on_post_move_to_device(self):
        self.layer_3.weight = self.layer_1.weight

    def training_step(self, batch, batch_idx):
        x, _ = batch
        return nn.functional.mse_loss(self(x), x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class XLACounters(Callback):
    """After every training batch (the step's graph is already cut), read torch_xla's host-side counters.

    Reading ``torch_xla.debug.metrics`` touches no device tensor, so it adds no transfer of its own.
    """

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        import torch_xla.debug.metrics as met

        def count(name):
            data = met.metric_data(name)
            return int(data[0]) if data else 0

        self.rows.append({"epoch": trainer.current_epoch, "batch": batch_idx,
                          "compiles": count("CompileTime"), "from_device": count("TransferFromDeviceTime")})


def _fit_counting(model: Module, loader, epochs: int, root: Path, log_every: int) -> tuple[Trainer, XLACounters]:
    counters = XLACounters()
    trainer = Trainer(accelerator="xla", devices=1, max_epochs=epochs, logger=False, enable_progress_bar=False,
                      enable_checkpointing=False, callbacks=[counters], log_every_n_steps=log_every,
                      default_root_dir=root)
    trainer.fit(model, loader)
    return trainer, counters


class ItemEveryStep(Regression):
    """Negative control: reads the loss on the host every step (the habit the no-sync check must catch)."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.last = loss.item()
        return loss


class GrowingInput(Regression):
    """Negative control: a different input shape every step, so each step compiles a new graph."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        keep = 1 + batch_idx % 4  # 1..4 rows: four shapes, so steps 1-4 each compile
        return super().training_step((x[:keep], y[:keep]), batch_idx)


def scenario_single(out: Path) -> dict:
    """xla_single: loss falls, compilations and device->host transfers flat per step, non-tensor batch items,
    weight tying, and two negative controls showing the counters do catch per-step syncs and recompiles; then, the
    runtime running in this process, a spawn over ``CPU_NUM_DEVICES`` (2 or more) refused (``result["touched"]``)."""
    # built first, while nothing in this process has used XLA: a spawn over the host's devices resolves; after the
    # runs below started the runtime here, its launch must refuse (see _touched)
    early = Trainer(accelerator="xla", devices=int(os.environ["CPU_NUM_DEVICES"]), logger=False,
                    enable_progress_bar=False, default_root_dir=out)
    import torch_xla.debug.metrics as met

    result: dict = {}
    model = TaggedRegression()
    loader = DataLoader(TaggedData(), batch_size=8)  # 8 equal batches per epoch
    epoch_losses = []

    class EpochLoss(Callback):
        def on_train_epoch_end(self, trainer, module):
            epoch_losses.append(float(trainer.callback_metrics["loss_epoch"]))

    counters = XLACounters()
    trainer = Trainer(accelerator="xla", devices=1, max_epochs=4, logger=False, enable_progress_bar=False,
                      callbacks=[counters, EpochLoss()], log_every_n_steps=1000, default_root_dir=out)
    result["strategy"] = type(trainer.strategy).__name__
    trainer.fit(model, loader)
    result["epoch_losses"] = epoch_losses
    result["rows"] = counters.rows
    result["param_device"] = str(next(model.parameters()).device)
    result["batch_devices"] = sorted({s[0] for s in model.seen})
    result["names_type"] = sorted({s[1] for s in model.seen})
    result["names_first_epoch"] = [n for s in model.seen[:8] for n in s[2]]
    result["checkpoint_exists"] = trainer.checkpoint_path.is_file()
    state = accelkit.checkpoint.files.load(trainer.checkpoint_path)
    result["checkpoint_devices"] = sorted({t.device.type for t in state["state_dict"].values()})

    # weight tying
    tied = WeightSharingModule()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(accelerator="xla", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                enable_checkpointing=False, default_root_dir=out).fit(
            tied, DataLoader(_data(32), batch_size=8))
    start = WeightSharingModule()
    result["tie"] = {
        "same_object": tied.layer_1.weight is tied.layer_3.weight,
        "same_storage": tied.layer_1.weight.data_ptr() == tied.layer_3.weight.data_ptr()
        if tied.layer_1.weight.device.type == "cpu" else None,
        "equal_values": bool(torch.equal(tied.layer_1.weight.cpu(), tied.layer_3.weight.cpu())),
        "device": str(tied.layer_1.weight.device),
        "num_params": len(list(tied.parameters())),
        "trained": not torch.equal(start.layer_1.weight, tied.layer_1.weight.cpu()),
        "warnings": [str(w.message) for w in caught if "distinct parameters" in str(w.message)],
    }

    # negative controls: the same counters must move when a step syncs or recompiles
    loader = DataLoader(_data(), batch_size=8)
    _, item = _fit_counting(ItemEveryStep(), loader, 1, out, 1000)
    _, grow = _fit_counting(GrowingInput(), loader, 1, out, 1000)
    result["item_rows"] = item.rows
    result["grow_rows"] = grow.rows
    result["metric_names"] = sorted(met.metric_names())
    result["touched"] = _touched(early, out)
    return result


# ------------------------------------------------------------------------------------------------- spawn
from accelkit_xla_spawn.strategy import XLASpawnStrategy  # noqa: E402 - cheap: imports no torch_xla


class FlatBufferAllReduceSpawn(XLASpawnStrategy):
    """TEST-SIDE SUBSTITUTE for the cross-replica collective, used only by the N=4 CPU scenario.

    On torch_xla 2.9 with PJRT_DEVICE=CPU every stock cross-replica collective (``xm.all_reduce``, which
    :meth:`XLASpawnStrategy.all_reduce_` and ``xm.rendezvous`` use) aborts in XLA's rendezvous
    (pytorch/xla#5005, #9089; re-measured here: "Termination timeout for all reduce ... only 1 of them
    arrived"). What does run on CPU is ONE all-reduce of ONE flat buffer through the private
    ``torch_xla._XLAC._xla_spmd_all_reduce`` with ``XLA_THREAD_POOL_SIZE`` >= the number of replicas. This
    subclass swaps only that primitive (and the barrier, broadcast and all_gather built on it); everything else --
    launch, pickled
    per-replica copies, ordinals, sharded device loader, gradient averaging, checkpoint writer -- is the
    production code. Production never uses this class.
    """

    def all_reduce_(self, reduce_type, tensors, scale=1.0):
        import torch_xla

        if not tensors:
            return
        flat = torch.cat([t.reshape(-1) for t in tensors])
        groups = [list(range(self.world_size))]
        reduced = torch_xla._XLAC._xla_spmd_all_reduce(reduce_type, flat, 1.0, groups) * scale
        offset = 0
        for t in tensors:
            n = t.numel()
            t.copy_(reduced[offset:offset + n].view_as(t))
            offset += n

    def barrier(self, name=None):
        import torch_xla

        if self._in_replica and self.world_size > 1:
            token = torch.zeros(1, device=self.root_device)
            self.all_reduce_("sum", [token])
            torch_xla.sync()

    def all_gather(self, tensor):
        """Each replica fills its own row of a zero float buffer; the sum over replicas is the stack (exact for
        the small integers and bytes the Trainer gathers: sizes, serialized checkpoint records)."""
        if not self._in_replica or self.world_size <= 1:
            return tensor.unsqueeze(0)
        rows = torch.zeros((self.world_size, *tensor.shape), dtype=torch.float32, device=self.root_device)
        rows[self.global_rank] = tensor.to(self.root_device, torch.float32)
        self.all_reduce_("sum", [rows])
        return rows.to(tensor.dtype)

    def broadcast(self, obj, src=0):
        """The pickled object as bytes in a float buffer, summed over replicas (only ``src`` contributes)."""
        import pickle

        if not self._in_replica or self.world_size <= 1:
            return obj
        payload = pickle.dumps(obj) if self.global_rank == src else b""
        size = torch.tensor([float(len(payload))], device=self.root_device)
        self.all_reduce_("sum", [size])
        buffer = torch.zeros(int(size.item()))
        if payload:
            buffer = torch.tensor(list(payload), dtype=torch.float32)
        buffer = buffer.to(self.root_device)
        self.all_reduce_("sum", [buffer])
        return pickle.loads(bytes(int(v) for v in buffer.cpu().tolist()))


_SPY_LOCK = __import__("threading").Lock()


def _install_write_spy(log: Path) -> None:
    """Inside the replica process: wrap the real ``atomic_save`` so each call also appends the writer's global
    ordinal and file name to ``log`` (the write itself still happens). Installed once per process."""
    import accelkit.checkpoint.files as ck

    with _SPY_LOCK:
        if getattr(ck.atomic_save, "_spy", False):
            return
        real = ck.atomic_save

        def spy(obj, path):
            import torch_xla.runtime as xr

            with open(log, "a") as fh:
                fh.write(f"{xr.global_ordinal()} {Path(path).name}\n")
            return real(obj, path)

        spy._spy = True
        ck.atomic_save = spy


class Record(Callback):
    """Each replica writes its ordinals, the sample indices it read and its final weights."""

    def __init__(self, out: Path) -> None:
        self.out = str(out)
        self.indices: list[int] = []

    def on_fit_start(self, trainer, module):
        _install_write_spy(Path(self.out, "writes.log"))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.indices.extend(int(i) for i in batch[2])

    def teardown(self, trainer, module, stage):
        s = trainer.strategy
        rank = s.global_rank
        info = {"global_rank": rank, "local_rank": s.local_rank, "world_size": s.world_size,
                "node_rank": s.node_rank, "device": str(s.root_device), "indices": self.indices,
                "module_id": id(module), "trainer_id": id(trainer), "pid": os.getpid()}
        Path(self.out, f"rank{rank}.json").write_text(json.dumps(info))
        torch.save({k: v.detach().cpu() for k, v in module.state_dict().items()}, Path(self.out, f"rank{rank}.pt"))


class IndexedData(Dataset):
    """``(x, y, index)`` so each replica can report which samples it read."""

    def __init__(self, n: int = 64) -> None:
        self.inner = _data(n)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return x, y, i


class IndexedRegression(Regression):
    def training_step(self, batch, batch_idx):
        x, y, _ = batch
        return super().training_step((x, y), batch_idx)


def scenario_spawn(out: Path) -> dict:
    """N=4 CPU replicas with xla_spawn (collective swapped as documented in FlatBufferAllReduceSpawn)."""
    import accelkit.checkpoint.files as ck

    world = int(os.environ["CPU_NUM_DEVICES"])
    model = IndexedRegression(lr=0.1)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    record = Record(out)
    trainer = Trainer(accelerator="xla", devices=world, strategy=FlatBufferAllReduceSpawn(), max_epochs=2,
                      logger=False, enable_progress_bar=False, callbacks=[record], default_root_dir=out)
    parent_has_xla = "torch_xla" in sys.modules
    trainer.fit(model, DataLoader(IndexedData(), batch_size=4))

    # reference: one process, plain torch on the CPU, the full global batch (4 replicas x 4) per step
    reference = IndexedRegression(lr=0.1)
    reference.load_state_dict(initial)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    data = IndexedData()
    for _ in range(2):
        for x, y, _ in DataLoader(data, batch_size=4 * world):
            opt.zero_grad()
            nn.functional.mse_loss(reference(x), y).backward()
            opt.step()
    torch.save(reference.state_dict(), out / "reference.pt")
    torch.save(model.state_dict(), out / "caller.pt")
    torch.save(initial, out / "initial.pt")
    checkpoint = ck.load(trainer.checkpoint_path)
    torch.save(checkpoint["state_dict"], out / "checkpoint_state.pt")
    return {"world": world, "parent_imported_xla_before_fit": parent_has_xla,
            "writes": (out / "writes.log").read_text().split("\n")[:-1], "parent_pid": os.getpid(),
            "global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
            "leftovers": sorted(p.name for p in trainer.checkpoint_path.parent.iterdir())}


def _touched(early: Trainer, out: Path) -> dict:
    """The XLA runtime is started in the parent before a spawn: both the resolution and the launch say so.

    ``early`` is a Trainer over the host's devices built before anything here used XLA; the runs before this one
    started the runtime in this (parent) process, and so does a tensor on the device here."""
    from accelkit.errors import ConfigurationError

    result = {}
    import torch_xla

    torch.ones(2, device=torch_xla.device()).sum().cpu()  # the runtime runs in this (parent) process
    try:
        Trainer(accelerator="xla", devices=int(os.environ["CPU_NUM_DEVICES"]), logger=False)
        result["resolve_error"] = None
    except ConfigurationError as exc:
        result["resolve_error"] = str(exc)
    try:
        early.fit(Regression(), DataLoader(_data(), batch_size=8))
        result["launch_error"] = None
    except RuntimeError as exc:
        result["launch_error"] = f"{type(exc).__name__}: {exc}"
    single = Trainer(accelerator="xla", devices=1, logger=False, enable_progress_bar=False, max_epochs=1,
                     default_root_dir=out)
    single.fit(Regression(), DataLoader(_data(), batch_size=8))  # one core needs no spawn: still fine
    result["single_after_touch_steps"] = single.global_step
    return result


SCENARIOS = {"single": scenario_single, "spawn": scenario_spawn}

if __name__ == "__main__":
    run_scenario_main(SCENARIOS)
