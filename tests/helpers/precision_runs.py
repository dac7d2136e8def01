"""The weights a short fit ends with on the CPU under each precision (and with gradient clipping and
accumulation), recorded the same way on accelkit's Trainer and on Lightning's
(``plugins/cpu/tests/test_cpu_precision.py`` compares them): a small MLP with dropout, SGD with momentum and a
StepLR, a shuffled loader, three epochs, everything seeded."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import pick

#: the Trainer options of each scenario, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "clip_norm_accumulate_2": {"gradient_clip_val": 0.5, "accumulate_grad_batches": 2},
    "clip_value": {"gradient_clip_val": 0.1, "gradient_clip_algorithm": "value"},
    "bf16-mixed": {"precision": "bf16-mixed"},
    "16-mixed": {"precision": "16-mixed"},
    "16-true": {"precision": "16-true"},
    "bf16-true": {"precision": "bf16-true"},
    "64-true": {"precision": "64-true"},
}


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Fit under ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); returns the parameters (as
    float64 numbers), their dtype, the dtype of a tensor made inside ``training_step`` and the steps taken."""
    chosen = pick(framework)
    made: list[str] = []

    class Small(chosen.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            made.append(str(torch.zeros(1).dtype))
            return nn.functional.mse_loss(self.net(batch[0]), batch[1].to(self.net[0].weight.dtype))

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.7)]

    torch.manual_seed(0)
    module = Small()
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(30, 4, generator=generator), torch.randn(30, 1, generator=generator)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(2))
    trainer = chosen.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False, max_epochs=3,
                             default_root_dir=root, **SCENARIOS[scenario])
    trainer.fit(module, loader)
    parameters = torch.cat([p.detach().double().flatten() for p in module.parameters()])
    return {"parameters": parameters.tolist(), "dtype": str(next(module.parameters()).dtype),
            "made_in_step": sorted(set(made)), "default_after": str(torch.get_default_dtype()),
            "global_step": trainer.global_step}
