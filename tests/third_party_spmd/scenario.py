"""Train with the third-party SPMD strategy on PJRT CPU devices: ``python scenario.py OUTDIR``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spmd_plugin

from accelkit import Module, Trainer


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=gen)
    return TensorDataset(x, x @ torch.randn(8, 1, generator=gen))


class Regression(Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.layer = nn.Linear(8, 1)
        self.sharding = None

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.sharding is None:
            import torch_xla

            self.sharding = torch_xla._XLAC._get_xla_sharding_spec(x)  # the test reads it; the plugin does not
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: Path) -> None:
    model = Regression()
    trainer = Trainer(accelerator="tpu", strategy="third_party_spmd", devices="auto", plugins=[spmd_plugin],
                      max_epochs=2, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                      enable_model_summary=False, default_root_dir=out)
    trainer.fit(model, DataLoader(data(), batch_size=16))
    trained = {k: v.cpu() for k, v in model.state_dict().items()}
    reference = Regression()  # plain torch, one CPU device, the whole batch (after XLA has run)
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        for x, y in DataLoader(data(), batch_size=16):
            opt.zero_grad()
            nn.functional.mse_loss(reference(x), y).backward()
            opt.step()
    import torch_xla.runtime as xr

    out.joinpath("result.json").write_text(json.dumps({
        "devices": xr.global_runtime_device_count(),
        "world_size": trainer.world_size,
        "devices_per_process": trainer.strategy.devices_per_process,
        "sharding": model.sharding,
        "global_step": trainer.global_step,
        "diff": max(float((trained[k] - v).abs().max()) for k, v in reference.state_dict().items()),
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
