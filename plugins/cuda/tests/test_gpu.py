"""Real training on NVIDIA GPUs. Skipped, with the reason, where no GPU is visible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.checkpoint import files as ckpt
from accelkit_cuda.strategies import CUDASingleDeviceStrategy

HAS_GPU = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")]


def _data(n=512, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=generator)
    y = (x[:, :4].sum(1) > 0).long()
    return TensorDataset(x, y)


class Probe(accelkit.Module):
    """Records, per step, the loss and the dtypes/devices the precision promises."""

    def __init__(self, lr=0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
        self.lr = lr
        self.losses: list[float] = []
        self.seen: dict[str, object] = {}

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.seen = {"param": self.net[0].weight.dtype, "input": x.dtype, "output": logits.dtype,
                     "device": x.device, "param_device": self.net[0].weight.device}
        loss = F.cross_entropy(logits.float(), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        return DataLoader(_data(), batch_size=32, shuffle=True)


def _trainer(tmp_path, **kwargs):
    kwargs.setdefault("max_epochs", 4)
    return accelkit.Trainer(accelerator="cuda", devices=1, logger=False, enable_progress_bar=False,
                            default_root_dir=tmp_path, **kwargs)


def _native_bf16():
    return torch.cuda.get_device_capability(0) >= (8, 0)


PROMISES = {
    # precision: (parameter dtype, input dtype, dtype of a Linear's output)
    "32-true": (torch.float32, torch.float32, torch.float32),
    "16-mixed": (torch.float32, torch.float32, torch.float16),
    "bf16-mixed": (torch.float32, torch.float32, torch.bfloat16),
    "bf16-true": (torch.bfloat16, torch.bfloat16, torch.bfloat16),
    "16-true": (torch.float16, torch.float16, torch.float16),
    "64-true": (torch.float64, torch.float64, torch.float64),
}


@pytest.mark.parametrize("precision", sorted(PROMISES))
def test_fit_on_one_gpu(tmp_path, precision):
    if precision.startswith("bf16") and not _native_bf16():
        pytest.skip(f"{precision} needs compute capability 8.0+; this GPU has {torch.cuda.get_device_capability(0)}")
    torch.manual_seed(0)
    model = Probe()
    trainer = _trainer(tmp_path, precision=precision, enable_checkpointing=False)
    trainer.fit(model)
    param, inp, out = PROMISES[precision]
    assert model.seen == {"param": param, "input": inp, "output": out, "device": torch.device("cuda", 0),
                          "param_device": torch.device("cuda", 0)}
    steps = len(model.losses) // 4
    first, last = sum(model.losses[:steps]) / steps, sum(model.losses[-steps:]) / steps
    assert last < 0.8 * first, f"loss did not fall under {precision}: {first:.3f} -> {last:.3f}"
    stats = trainer.accelerator.get_device_stats(torch.device("cuda", 0))
    # Lightning's figures: the caching allocator's statistics
    assert stats["allocated_bytes.all.peak"] > 0
    assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"]


class InjectInf(Probe):
    """Puts an inf into one gradient at step ``bad_step`` where the gradient scaler sees it, and records per step
    whether the weights changed and the scale before and after.

    The inf goes in ``on_after_backward``: the scaler unscales and checks the gradients after that hook and
    before ``on_before_optimizer_step`` (Lightning's order too), so an inf put in later is never checked.
    """

    def __init__(self, bad_step):
        super().__init__()
        self.bad_step = bad_step
        self.changed: list[bool] = []
        self.scales: list[tuple[float, float]] = []
        self._before: list[torch.Tensor] = []
        self._scale = 0.0

    def on_train_batch_start(self, batch, batch_idx):
        self._before = [p.detach().clone() for p in self.parameters()]

    def on_after_backward(self):
        self._scale = self.trainer.precision.scaler.get_scale()  # the scaler exists once a loss was scaled
        if self.trainer.global_step == self.bad_step:
            self.net[0].weight.grad[0, 0] = float("inf")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.changed.append(any(not torch.equal(a, p) for a, p in zip(self._before, self.parameters(), strict=True)))
        self.scales.append((self._scale, self.trainer.precision.scaler.get_scale()))


def test_grad_scaler_skips_the_step_with_inf(tmp_path):
    torch.manual_seed(0)
    bad = 3
    model = InjectInf(bad_step=bad)
    trainer = _trainer(tmp_path, precision="16-mixed", max_steps=6, enable_checkpointing=False)
    trainer.fit(model)
    assert len(model.changed) == 6
    before, after = model.scales[bad]
    assert model.changed[bad] is False and after == before / 2  # skipped, and the scale halved for it
    for changed, (before, after) in zip(model.changed, model.scales, strict=True):
        assert changed == (after == before)  # a step is taken exactly when no inf halved the scale
    assert model.changed[-1]  # training goes on after the skipped step
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_state_saved_on_gpu_loads_on_cpu(tmp_path):
    torch.manual_seed(0)
    model = Probe()
    trainer = _trainer(tmp_path, precision="16-mixed", max_epochs=2)
    trainer.fit(model)
    path = trainer.checkpoint_path
    state = ckpt.load(path)  # map_location cpu, weights_only
    tensors = [t for t in state["state_dict"].values()]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert "scaler" in state["precision"]
    restored = Probe()
    restored.load_state_dict(state["state_dict"])
    x = _data(8, seed=1).tensors[0]
    with torch.no_grad():
        expected = model.cpu()(x)
        assert torch.allclose(restored(x), expected)
    # and training resumes from it on the CPU
    cpu = accelkit.Trainer(accelerator="cpu", max_epochs=3, logger=False, enable_progress_bar=False,
                           default_root_dir=tmp_path / "cpu")
    cpu.fit(restored, ckpt_path=path)
    assert cpu.current_epoch == 3


def test_pinning_is_the_users_choice(tmp_path):
    loader = DataLoader(_data(64), batch_size=16)
    strategy = _trainer(tmp_path).strategy
    assert strategy.pin_memory is False and strategy.process_dataloader(loader, "fit") is loader
    assert not next(iter(loader))[0].is_pinned()
    own = DataLoader(_data(64), batch_size=16, pin_memory=True)  # the user's own choice, kept
    assert strategy.process_dataloader(own, "fit") is own and next(iter(own))[0].is_pinned()
    copy = CUDASingleDeviceStrategy(pin_memory=True).process_dataloader(loader, "fit")
    x, y = next(iter(copy))
    assert copy is not loader and not loader.pin_memory
    assert x.is_pinned() and y.is_pinned()


class DeviceBatches(Probe):
    """Builds its batches on the GPU, as Lightning's PPO example does."""

    def train_dataloader(self):
        data = _data()
        return DataLoader(TensorDataset(*(t.to("cuda") for t in data.tensors)), batch_size=32, shuffle=True)


@pytest.mark.parametrize("pin", [False, True])
def test_a_loader_yielding_gpu_tensors_trains(tmp_path, pin):
    torch.manual_seed(0)
    model = DeviceBatches()
    trainer = _trainer(tmp_path, max_epochs=2, enable_checkpointing=False,
                       strategy=CUDASingleDeviceStrategy(pin_memory=pin))
    if pin:  # asked to pin, it pins what it can and names what it cannot
        with pytest.warns(UserWarning, match=r"cannot be page-locked \(on cuda:0\)"):
            trainer.fit(model)
    else:
        trainer.fit(model)
    assert model.seen["device"] == torch.device("cuda", 0)
    assert len(model.losses) == 2 * 16 and all(loss == loss for loss in model.losses)
    assert sum(model.losses[-4:]) < sum(model.losses[:4])


def test_bf16_refused_on_older_gpu(tmp_path):
    if _native_bf16():  # asked inside the test: at collection it would initialise CUDA for the whole session
        pytest.skip("this GPU has native bfloat16; the refusal needs an older GPU")
    with pytest.raises((ValueError, accelkit.ConfigurationError), match="native bfloat16"):
        _trainer(tmp_path, precision="bf16-mixed").fit(Probe())


SPAWN_SCRIPT = textwrap.dedent("""
    import json, os, sys, torch
    import accelkit
    sys.path.insert(0, {here!r})
    from test_gpu_helpers import RankProbe


    def main(out):
        trainer = accelkit.Trainer(accelerator="cuda", devices=-1, strategy="ddp_spawn", max_epochs=2, logger=False,
                                   enable_progress_bar=False, enable_checkpointing=False, default_root_dir=out)
        assert not torch.cuda.is_initialized(), "resolving the run initialised CUDA in the parent"
        model = RankProbe(out)
        before = [p.detach().clone() for p in model.parameters()]
        trainer.fit(model)
        result = {{"parent_initialised": torch.cuda.is_initialized(), "world_size": trainer.world_size,
                   "weights_changed": any(not torch.equal(a, b) for a, b in zip(before, model.parameters())),
                   "param_device": str(next(model.parameters()).device)}}
        with open(os.path.join(out, "parent.json"), "w") as f:
            json.dump(result, f)


    if __name__ == "__main__":  # each spawned worker re-imports this script; only the parent runs main
        main(sys.argv[1])
""")


@pytest.mark.slow
def test_ddp_spawn_one_process_per_gpu(tmp_path):
    here = str(Path(__file__).parent)
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN_SCRIPT.format(here=here))
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    parent = json.loads((tmp_path / "parent.json").read_text())
    n = torch.cuda.device_count()
    assert parent == {"parent_initialised": False, "world_size": n, "weights_changed": True, "param_device": "cpu"}
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]
    assert [r["current_device"] for r in ranks] == list(range(n))
    assert all(r["world_size"] == n and r["backend"] == ("nccl" if n > 1 else "none") for r in ranks)
    assert {r["batches"] for r in ranks} == {ranks[0]["batches"]}  # each rank read its own equal shard


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_a_fabric_loop_on_one_gpu(precision):
    """``accelkit.Fabric`` on the cuda plugin: the module, the batches and the loss on the GPU, the forward under the
    precision's autocast, the gradient scaler behind ``backward`` for ``16-mixed``; the loss goes down."""
    if precision == "bf16-mixed" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    fabric = accelkit.Fabric(accelerator="cuda", devices=1, precision=precision)
    fabric.launch()
    fabric.seed_everything(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
    inner = set()  # the dtype inside the forward (under autocast); the wrapper returns float32, as Lightning's
    model[-1].register_forward_hook(lambda module, args, out: inner.add(out.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(_data(), batch_size=64, shuffle=True))
    losses, dtypes = [], set()
    for _epoch in range(3):
        for x, y in loader:
            assert x.device.type == "cuda" and y.device.type == "cuda"
            logits = model(x)
            dtypes.add(logits.dtype)
            loss = F.cross_entropy(logits.float(), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            losses.append(loss.item())
    assert fabric.device.type == "cuda" and next(model.parameters()).device.type == "cuda"
    expected = {"32-true": torch.float32, "16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}[precision]
    assert inner == {expected} and dtypes == {torch.float32}
    assert sum(losses[-8:]) / 8 < sum(losses[:8]) / 8
