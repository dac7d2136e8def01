"""(p) A module written for a GPU with ``precision=16``, run on the CPU: as Lightning does, the run uses bfloat16
mixed precision (CPU autocast; float16 AMP is not supported on CPU) and trains, instead of refusing to start.

Written as a Lightning user writes it; only the imports point at accelkit.
"""

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L

FEATURES, SAMPLES, BATCH, EPOCHS = 16, 64, 8, 4


class LitRegressor(L.LightningModule):
    def __init__(self, root: str):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))
        self.root = root
        self.compute_dtypes = set()

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x)
        self.compute_dtypes.add(str(out.dtype))
        loss = F.mse_loss(out.float(), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def on_train_end(self):
        write(self.root, "dtypes", self.global_rank, {
            "compute": sorted(self.compute_dtypes), "weights": str(self.net[0].weight.dtype)})


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    x = torch.randn(SAMPLES, FEATURES, generator=torch.Generator().manual_seed(0))
    y = x.sum(dim=1, keepdim=True) / 4
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
    model = LitRegressor(args.root)
    trainer = L.Trainer(max_epochs=EPOCHS, precision=16, enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, **trainer_kwargs(args))
    before = F.mse_loss(model.net(x), y).item()
    trainer.fit(model, loader)
    after = F.mse_loss(model.net(x), y).item()
    expect(after < 0.5 * before, f"loss did not fall under precision=16: {before} -> {after}")
    records = read(args.root, "dtypes")
    expect(sorted(records) == list(range(args.devices)), f"records from ranks {sorted(records)}")
    for rank, seen in records.items():
        expect(seen["compute"] == ["torch.bfloat16"], f"rank {rank} computed in {seen['compute']}, not bfloat16")
        expect(seen["weights"] == "torch.float32", f"rank {rank} kept its weights in {seen['weights']}")
    ok("precision16")


if __name__ == "__main__":
    main()
