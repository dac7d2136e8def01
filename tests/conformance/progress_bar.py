"""(p) The progress bar as a callback, as Lightning's docs ("Customize the progress bar") use it.

* ``TQDMProgressBar(refresh_rate=...)`` replaces the Trainer's default bar; ``trainer.progress_bar_callback`` is
  that bar, and the bar moves every ``refresh_rate`` batches and at the last one.
* A subclass overrides ``get_metrics`` (drops ``v_num``, adds an item) and ``init_validation_tqdm`` (the docs'
  ``"running validation ..."`` label): the training bar shows the logged ``prog_bar`` values, the validation's
  too, and the added item.
* Only global rank zero draws: on the other ranks the bar is disabled.
* ``RichProgressBar`` draws the same run with rich, and brings ``RichModelSummary`` as the default summary.

Written as a Lightning user writes it; only the imports point at accelkit.
"""

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule
from accelkit.callbacks import (
    RichModelSummary,  # was: from lightning.pytorch.callbacks import RichModelSummary
    RichProgressBar,  # was: from lightning.pytorch.callbacks import RichProgressBar
    TQDMProgressBar,  # was: from lightning.pytorch.callbacks import TQDMProgressBar
)

SAMPLES, BATCH, REFRESH = 64, 4, 3


class Regressor(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class LitProgressBar(TQDMProgressBar):
    def __init__(self, root):
        super().__init__(refresh_rate=REFRESH)
        self.root = root
        self.moves = []

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        items["epoch"] = trainer.current_epoch
        return items

    def init_validation_tqdm(self):
        bar = super().init_validation_tqdm()
        bar.set_description("running validation ...")
        return bar

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        position = self.train_progress_bar.n
        if not self.train_progress_bar.disable and position and (not self.moves or self.moves[-1] != position):
            self.moves.append(position)  # where the bar moved to (it stands still between refreshes)

    def on_train_end(self, trainer, pl_module):
        bar = self.train_progress_bar
        write(self.root, "tqdm", trainer.global_rank, {
            "enabled": self.is_enabled, "moves": self.moves, "postfix": bar.postfix or "",
            "total": self.total_train_batches, "is_callback": trainer.progress_bar_callback is self})
        super().on_train_end(trainer, pl_module)


class RecordedRichBar(RichProgressBar):
    def on_train_end(self, trainer, pl_module):
        console = self.progress.console if self.progress is not None else None
        super().on_train_end(trainer, pl_module)  # the final picture is drawn when the bars stop
        write(self.root, "rich", trainer.global_rank, {
            "enabled": self.is_enabled, "text": console.export_text() if console is not None else "",
            "summary": [type(c).__name__ for c in trainer.callbacks if "Summary" in type(c).__name__]})


def loaders():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 2, generator=generator)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    return DataLoader(data, batch_size=BATCH), DataLoader(data, batch_size=BATCH * 2)


def check_tqdm(args):
    bar = LitProgressBar(args.root)
    trainer = L.Trainer(max_epochs=2, callbacks=[bar], logger=True, enable_checkpointing=False,
                        enable_model_summary=False, **trainer_kwargs(args))
    expect(trainer.progress_bar_callback is bar, "the bar given is not trainer.progress_bar_callback")
    trainer.fit(Regressor(), *loaders())
    runs = read(args.root, "tqdm")
    expect(sorted(runs) == list(range(args.devices)), f"records from ranks {sorted(runs)}")
    per_rank = SAMPLES // BATCH // args.devices
    zero = runs[0]
    expect(zero["enabled"] and zero["is_callback"] and zero["total"] == per_rank, f"rank 0's bar: {zero}")
    wanted = [n for n in range(1, per_rank + 1) if n % REFRESH == 0 or n == per_rank]
    expect(zero["moves"] == wanted * 2, f"bar positions {zero['moves']}, expected {wanted} in each epoch")
    for item in ("train_loss=", "val_loss=", "epoch=1"):
        expect(item in zero["postfix"], f"{item} missing from the bar's metrics {zero['postfix']!r}")
    expect("v_num" not in zero["postfix"], f"get_metrics dropped v_num, yet the bar shows {zero['postfix']!r}")
    for rank, run in runs.items():
        if rank:
            expect(not run["enabled"] and not run["moves"], f"rank {rank} drew a bar: {run}")


def check_rich(args):
    bar = RecordedRichBar(console_kwargs={"width": 120, "record": True})
    bar.root = args.root
    trainer = L.Trainer(max_epochs=2, callbacks=[bar], logger=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    expect(any(isinstance(c, RichModelSummary) for c in trainer.callbacks), "no RichModelSummary with a rich bar")
    trainer.fit(Regressor(), *loaders())
    runs = read(args.root, "rich")
    zero = runs[0]
    expect(zero["summary"] == ["RichModelSummary"], f"summaries {zero['summary']}")
    per_rank = SAMPLES // BATCH // args.devices
    for item in ("Epoch 1", f"{per_rank}/{per_rank}", "train_loss:", "val_loss:"):
        expect(item in zero["text"], f"{item!r} missing from the rich bar:\n{zero['text']}")
    for rank, run in runs.items():
        if rank:
            expect(not run["enabled"] and not run["text"], f"rank {rank} drew a rich bar: {run}")


def main():
    args = parse_args(__doc__)
    check_tqdm(args)
    check_rich(args)
    ok("progress_bar")


if __name__ == "__main__":
    main()
