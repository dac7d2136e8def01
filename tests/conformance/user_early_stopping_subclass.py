"""(v) A user project's subclass of ``EarlyStopping`` (DiYi1999/SpaceHMchat,
``Code/AD_repository/model/mycallback.py``):
it turns the check after validation off (``on_validation_end`` does nothing) and runs it once when training ends
(``on_train_end`` calls ``self._run_early_stopping_check(trainer)``; it runs before ``on_fit_end``), reached through
``pl.callbacks.EarlyStopping``.
The project's ``import_lightning()`` helper picks ``lightning.pytorch`` or ``pytorch_lightning``.

Stand-in: the anomaly-detection model is a regression whose ``val_loss`` never improves (learning rate 0), so the
check at the end of training counts one more epoch without improvement and records the stop. Only the imports point
at accelkit.
"""

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def import_lightning():
    try:
        import accelkit as pl  # was: import lightning.pytorch as pl
    except ModuleNotFoundError:
        import accelkit as pl  # was: import pytorch_lightning as pl
    return pl


pl = import_lightning()
from accelkit import LightningModule  # noqa: E402 - was: pl.LightningModule


class MyEarlyStopping(pl.callbacks.EarlyStopping):
    def on_validation_end(self, trainer, pl_module):
        pass

    def on_train_end(self, trainer, pl_module):
        self._run_early_stopping_check(trainer)


class Record(pl.Callback):
    def __init__(self, root, stop):
        self.root, self.stop = root, stop

    def on_fit_end(self, trainer, pl_module):
        append(self.root, "stop", trainer.global_rank,
               [trainer.current_epoch, self.stop.wait_count, trainer.should_stop,
                bool(torch.isfinite(self.stop.best_score))])


class Net(LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def main():
    args = parse_args(__doc__)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator))
    stop = MyEarlyStopping(monitor="val_loss", patience=5, check_on_train_epoch_end=False)
    trainer = pl.Trainer(max_epochs=3, callbacks=[stop, Record(args.root, stop)], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, **trainer_kwargs(args))
    trainer.fit(Net(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=16))
    seen = read(args.root, "stop")
    expect(sorted(seen) == list(range(args.devices)), f"ranks: {sorted(seen)}")
    for rank, records in seen.items():  # no check during training; the one at its end saw val_loss (a best score)
        expect(records == [[3, 0, False, True]], f"rank {rank}: [epoch, wait, should_stop, checked] = {records}")
    ok("user_early_stopping_subclass")


if __name__ == "__main__":
    main()
