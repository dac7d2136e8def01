"""Scenarios of ``xla_spmd`` on real XLA (PJRT_DEVICE=CPU, CPU_NUM_DEVICES=N), each in a process of its own:
``python spmd_scenarios.py NAME OUTDIR``. Each writes ``OUTDIR/result.json``; test_xla_spmd.py asserts on it.

The single-device references are computed with plain torch on the CPU *after* the XLA runs (a CPU backward pass
before torch_xla's first use breaks XLA autograd in that process).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelkit import Callback, Module, Trainer

BATCH, SAMPLES, LR, MOMENTUM = 16, 64, 0.05, 0.9


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 8, generator=gen)
    w = torch.randn(8, 1, generator=gen)
    return TensorDataset(x, (x @ w).squeeze(-1) + 0.1 * torch.randn(SAMPLES, generator=gen))


class MLP(Module):
    """8 -> 16 -> 1; records the sharding of the first batch it sees."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.batch_shardings: list[str] = []

    def forward(self, x):
        return self.body(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if not self.batch_shardings:
            import torch_xla

            self.batch_shardings = [torch_xla._XLAC._get_xla_sharding_spec(t) for t in (x, y)]
            self.batch_shapes = [list(x.shape), list(y.shape)]
        loss = nn.functional.mse_loss(self(x).float(), y.float())
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)


class Compiles(Callback):
    """torch_xla's compilation count after every training batch (host-side counter, no device transfer)."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        import torch_xla.debug.metrics as met

        data = met.metric_data("CompileTime")
        self.counts.append(int(data[0]) if data else 0)


class SaveAfterEpoch(Callback):
    """Writes a checkpoint directory at the end of epoch ``epoch``."""

    def __init__(self, path: Path, epoch: int) -> None:
        self.path, self.epoch = path, epoch

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == self.epoch:
            trainer.save_checkpoint(self.path)


def fit(out: Path, epochs: int, callbacks=(), ckpt_path=None, **strategy_options):
    from accelkit_xla_spmd import XLASPMDStrategy

    precision = strategy_options.pop("precision", "32-true")
    model = MLP()
    counts = Compiles()
    strategy = XLASPMDStrategy(**strategy_options) if strategy_options else "xla_spmd"
    checkpointing = any(type(c).__name__ == "ModelCheckpoint" for c in callbacks)
    trainer = Trainer(accelerator="tpu", strategy=strategy, devices="auto", precision=precision, max_epochs=epochs,
                      logger=False, enable_progress_bar=False, enable_checkpointing=checkpointing,
                      log_every_n_steps=1000,
                      enable_model_summary=False, callbacks=[counts, *callbacks], default_root_dir=out)
    trainer.fit(model, DataLoader(dataset(), batch_size=BATCH), ckpt_path=ckpt_path)
    return trainer, model, counts.counts


def cpu_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().float() for k, v in model.state_dict().items() if "batch_shardings" not in k}


def reference(epochs: int) -> dict[str, torch.Tensor]:
    """Plain torch on the CPU, one device, the whole batch."""
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for _ in range(epochs):
        for x, y in DataLoader(dataset(), batch_size=BATCH):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    return cpu_weights(model)


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def shard_bytes(model: nn.Module) -> dict[str, int]:
    """Parameter bytes in total and on the fullest device, read from the devices' shards."""
    import torch_xla.distributed.spmd as xs

    per_device: dict[int, int] = {}
    total = 0
    for param in model.parameters():
        total += param.numel() * param.element_size()
        wrapped = xs.wrap_if_sharded(param)
        if isinstance(wrapped, xs.XLAShardedTensor):
            shards = wrapped.local_shards
            for shard in shards:
                per_device[shard.shard_device] = per_device.get(shard.shard_device, 0) + \
                    shard.unpadded_data.numel() * shard.unpadded_data.element_size()
        else:  # replicated: every device holds all of it
            import torch_xla.runtime as xr

            for device in range(xr.global_runtime_device_count()):
                per_device[device] = per_device.get(device, 0) + param.numel() * param.element_size()
    return {"total": total, "max_per_device": max(per_device.values()), "devices": len(per_device)}


def scenario_train(out: Path) -> dict:
    """Data parallel, FSDP-style, a 2-D mesh, bf16, and checkpoint resume, on every local device."""
    import torch_xla.runtime as xr

    result: dict = {}
    epochs = 3
    trainer, model, counts = fit(out, epochs)
    result["devices"] = xr.global_runtime_device_count()
    result["world_size"] = trainer.world_size
    result["strategy"] = type(trainer.strategy).__name__
    result["mesh_shape"] = list(trainer.strategy.mesh.mesh_shape)
    result["batch_shardings"] = model.batch_shardings
    result["batch_shapes"] = model.batch_shapes
    result["compiles"] = counts
    dp = cpu_weights(model)

    _, fsdp_model, fsdp_counts = fit(out, epochs, fsdp_axis="fsdp")
    result["fsdp_compiles"] = fsdp_counts
    result["fsdp_bytes"] = shard_bytes(fsdp_model)
    result["dp_bytes"] = shard_bytes(model)
    result["fsdp_param_shardings"] = {n: __import__("torch_xla")._XLAC._get_xla_sharding_spec(p)
                                      for n, p in fsdp_model.named_parameters()}
    fsdp = cpu_weights(fsdp_model)

    n = result["devices"]
    hsdp_trainer, hsdp_model, _ = fit(out, epochs, mesh_shape=(2, n // 2), fsdp_axis="fsdp")
    result["hsdp_mesh"] = list(hsdp_trainer.strategy.mesh.mesh_shape)
    result["hsdp_batch_shardings"] = hsdp_model.batch_shardings
    hsdp = cpu_weights(hsdp_model)

    _, mixed_model, mixed_counts = fit(out, epochs, precision="bf16-mixed")
    result["bf16_mixed_param_dtype"] = str(next(mixed_model.parameters()).dtype)
    result["bf16_mixed_compiles"] = mixed_counts
    mixed = cpu_weights(mixed_model)
    _, true_model, _ = fit(out, epochs, precision="bf16-true")
    result["bf16_true_param_dtype"] = str(next(true_model.parameters()).dtype)
    bf16_true = cpu_weights(true_model)

    # checkpoint: 1 epoch, save a sharded directory, resume to 3 epochs == 3 epochs straight (FSDP-sharded, so
    # the parameters and the momentum buffers are written as shards)
    path = out / "epoch0.ckpt"
    fit(out, 1, callbacks=[SaveAfterEpoch(path, 0)], fsdp_axis="fsdp")
    result["checkpoint_files"] = sorted(p.name for p in path.iterdir())
    result["checkpoint_leftovers"] = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
    resumed_trainer, resumed_model, resumed_counts = fit(out, epochs, ckpt_path=path, fsdp_axis="fsdp")
    result["resumed_global_step"] = resumed_trainer.global_step
    result["resumed_compiles"] = resumed_counts
    resumed = cpu_weights(resumed_model)
    # and the same directory resumes on a data-parallel mesh (resharded on load)
    _, resumed_dp_model, _ = fit(out, epochs, ckpt_path=path)
    resumed_dp = cpu_weights(resumed_dp_model)

    # the usual user path: ModelCheckpoint (save_last) writes checkpoint directories; "last" resumes; the directory
    # consolidates into one ordinary file that torch.load(weights_only=True) reads
    from accelkit.callbacks import ModelCheckpoint
    from accelkit.checkpoint.sharded import consolidate

    folder = out / "callback"
    _, ckpt_model, _ = fit(out, 2, callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)], fsdp_axis="fsdp")
    result["callback_files"] = sorted(p.name for p in folder.iterdir())
    consolidate(folder / "last.ckpt", out / "consolidated.ckpt")
    flat = torch.load(out / "consolidated.ckpt", weights_only=True)
    result["diff_consolidated"] = max_diff({k: v.float() for k, v in flat["state_dict"].items()},
                                           cpu_weights(ckpt_model))
    result["consolidated_optimizer_keys"] = sorted(str(k) for k in flat["optimizer_states"][0]["state"])
    last_trainer, last_model, _ = fit(out, epochs, callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)],
                                      ckpt_path="last", fsdp_axis="fsdp")
    result["last_resumed_step"] = last_trainer.global_step
    result["diff_last_resumed"] = max_diff(cpu_weights(last_model), fsdp)

    ref = reference(epochs)
    result["diff_dp"] = max_diff(dp, ref)
    result["diff_fsdp"] = max_diff(fsdp, ref)
    result["diff_hsdp"] = max_diff(hsdp, ref)
    result["diff_bf16_mixed"] = max_diff(mixed, ref)
    result["diff_bf16_true"] = max_diff(bf16_true, ref)
    result["diff_resumed"] = max_diff(resumed, fsdp)
    result["diff_resumed_dp"] = max_diff(resumed_dp, fsdp)
    result["trained"] = max_diff(ref, cpu_weights(MLP()))
    return result


def scenario_debug(out: Path) -> dict:
    """``strategy="xla_spmd_debug"`` before anything else uses torch_xla (its variables must precede the runtime)."""
    imported_before = "torch_xla" in sys.modules
    model = MLP()
    trainer = Trainer(accelerator="tpu", strategy="xla_spmd_debug", devices="auto", max_epochs=3, logger=False,
                      enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                      default_root_dir=out)
    trainer.fit(model, DataLoader(dataset(), batch_size=BATCH))
    report = out / "xla_debug" / "fit-rank0.json"
    data = json.loads(report.read_text())
    return {"strategy": type(trainer.strategy).__name__, "torch_xla_imported_before_fit": imported_before,
            "batch_shardings": model.batch_shardings, "world_size": data["world_size"], "rank": data["rank"],
            "summary": data["summary"], "findings": [f["code"] for f in data["findings"]],
            "text_head": (out / "xla_debug" / "fit-rank0.txt").read_text()[:300],
            "log_exists": (out / "xla_debug" / "pt_xla_debug.log").is_file()}


def scenario_touched(out: Path) -> dict:
    """The script used an XLA device before fit(): the runtime started without SPMD, and the run says so."""
    import torch_xla

    (torch.ones(2, device=torch_xla.device()) * 2).cpu()
    try:
        fit(out, 1)
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"error": None}


SCENARIOS = {"train": scenario_train, "debug": scenario_debug, "touched": scenario_touched}

if __name__ == "__main__":
    name, outdir = sys.argv[1], Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    data = SCENARIOS[name](outdir)
    (outdir / "result.json").write_text(json.dumps(data, indent=1))
