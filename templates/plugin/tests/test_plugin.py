"""Tests of the template plugin. They need the plugin installed (``pip install -e . --no-deps``) so that
accelkit finds it through its entry point, exactly as users get it."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.plugins import PluginManager


class Regression(accelkit.Module):
    """y = 3x - 1 from 64 noisy points."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)
        generator = torch.Generator().manual_seed(0)
        x = torch.rand(64, 1, generator=generator)
        self.data = TensorDataset(x, 3 * x - 1 + 0.01 * torch.randn(64, 1, generator=generator))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=16)


def make_trainer(tmp_path, **kwargs):
    kwargs.setdefault("max_epochs", 30)
    return accelkit.Trainer(default_root_dir=tmp_path, enable_progress_bar=False, logger=False,
                            enable_checkpointing=False, **kwargs)


def test_discovered_from_its_distribution():
    info = PluginManager().infos["mydevice"]
    assert info.status == "loaded", info.reason
    assert info.distribution == "accelkit-mydevice"
    assert info.version == importlib.metadata.version("accelkit-mydevice")


@pytest.mark.parametrize("name", ["mydevice", "MyDev"])
def test_fit_by_name_and_alias(tmp_path, name):
    model = Regression()
    trainer = make_trainer(tmp_path, accelerator=name)
    assert trainer.config.accelerator == "mydevice"
    assert trainer.config.strategy == "single_device"
    trainer.fit(model)
    assert model.layer.weight.item() == pytest.approx(3.0, abs=0.2)
    assert model.layer.bias.item() == pytest.approx(-1.0, abs=0.2)


def test_auto_prefers_it_while_available_and_falls_back(tmp_path, monkeypatch):
    assert make_trainer(tmp_path).config.accelerator == "mydevice"
    monkeypatch.setenv("ACCELKIT_MYDEVICE_AVAILABLE", "0")
    if "cpu" not in PluginManager().registry.accelerator_names():
        pytest.skip("accelkit-cpu is not installed, so there is nothing to fall back to")
    assert make_trainer(tmp_path).config.accelerator == "cpu"
    with pytest.raises(accelkit.ConfigurationError, match="ACCELKIT_MYDEVICE_AVAILABLE=0"):
        make_trainer(tmp_path, accelerator="mydevice")


def test_own_strategy_and_precision(tmp_path):
    model = Regression()
    trainer = make_trainer(tmp_path, accelerator="mydevice", strategy="counting", precision="bf16-rounded",
                           max_epochs=2)
    assert type(trainer.strategy).__name__ == "CountingStrategy"
    trainer.fit(model)
    assert trainer.strategy.steps == 2 * 4  # 64 samples / batch 16, two epochs
    for param in model.parameters():
        assert param.dtype == torch.float32
        assert torch.equal(param, param.to(torch.bfloat16).float())  # every weight is a bfloat16 value


def test_reused_core_ddp_spawn(tmp_path):
    model = Regression()
    trainer = make_trainer(tmp_path, accelerator="mydevice", devices=2, strategy="ddp_spawn", max_epochs=60)
    assert trainer.config.world_size == 2
    trainer.fit(model)
    assert model.layer.weight.item() == pytest.approx(3.0, abs=0.3)


def test_strategy_for_another_accelerator_is_refused(tmp_path):
    if "cpu" not in PluginManager().registry.accelerator_names():
        pytest.skip("accelkit-cpu is not installed")
    with pytest.raises(accelkit.ConfigurationError, match="mydevice_counting.*does not run on accelerator 'cpu'"):
        make_trainer(tmp_path, accelerator="cpu", strategy="mydevice_counting")
