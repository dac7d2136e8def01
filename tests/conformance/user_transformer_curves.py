"""(z) A user project's sequence classifier and its callbacks (Novartis/AEGIS, BSD-3-Clause:
``mhciipresentation/models.py``, ``callbacks.py``, ``logger.py``, ``scheduler.py``, ``metrics.py`` and
``experiments/train.py``): a transformer encoder over token ids whose output is ``double()``, so every loss and
``val_loss`` is float64; torchmetrics objects called on CPU tensors and logged per epoch with ``sync_dist=True``;
two validation loaders (``val_loss/dataloader_idx_0`` is monitored); a Noam schedule, a ``_LRScheduler`` subclass,
stepped every batch; an ``EarlyStopping`` subclass that waits ``delay_epochs`` before checking and forgets its wait
count when training ends; a callback that keeps every step's output dict (``y_hat``, ``y_true``, ``idx``) from
``on_*_batch_end`` and pickles curves (ROC, precision-recall, confusion matrix) per epoch and loader; a ``Logger``
subclass written from Lightning's recipe (``from lightning.pytorch.loggers.logger import Logger,
rank_zero_experiment``) beside a ``CSVLogger``; ``log_every_n_steps=1``, ``min_steps``. Stand-ins: the peptide data
are random token sequences with padding, the model one small encoder layer (no positional encoding), three metrics
of eight, 3 epochs; ``GPUUsageLogger`` (GPUtil) is left out and the scheduler's ``verbose`` argument, which torch no
longer takes, is dropped; the logger keeps what it is given instead of printing it, and the steps share one helper.
Only the imports point at accelkit.
"""

import math
import os
import pickle
from pathlib import Path

import torch
import torchmetrics
from _cli import expect, ok, parse_args, trainer_kwargs
from sklearn.preprocessing import Binarizer
from torch import nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.data import DataLoader, TensorDataset

import accelkit as pl  # was: import pytorch_lightning as pl
from accelkit import loggers as pl_loggers  # was: from pytorch_lightning import loggers as pl_loggers
from accelkit.callbacks import ModelCheckpoint  # was: from pytorch_lightning.callbacks import ModelCheckpoint
from accelkit.callbacks.early_stopping import EarlyStopping  # was: from pytorch_lightning.callbacks.early_stopping
from accelkit.loggers.logger import Logger, rank_zero_experiment  # noqa: F401 - was: lightning.pytorch.loggers.logger
from accelkit.utilities import rank_zero_only  # was: from lightning.pytorch.utilities import rank_zero_only


# -------------------------------------------------------------------------------------------- mhciipresentation
def make_dir(path):
    Path(path).mkdir(parents=True, exist_ok=True)


def save_obj(obj, path):
    with open(path, "wb") as handle:
        pickle.dump(obj, handle)


class NoamScheduler(_LRScheduler):
    def __init__(self, optimizer, d_model, warmup_steps, last_epoch=-1):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        current_step = self.last_epoch + 1
        scale = self.d_model**-0.5
        arg1 = current_step**-0.5
        arg2 = current_step * (self.warmup_steps**-1.5)
        return [base_lr * scale * min(arg1, arg2) for base_lr in self.base_lrs]


class CurveLogger(Logger):
    def __init__(self):
        super().__init__()
        self.received = []  # (the project prints; the row keeps what it was given)

    @property
    def name(self):
        return "CurveLogger"

    @property
    def version(self):
        return "0"

    @rank_zero_only
    def log_hyperparams(self, params):
        pass

    @rank_zero_only
    def log_metrics(self, metrics, step):
        self.received.append(dict(metrics))

    @rank_zero_only
    def save(self):
        pass

    @rank_zero_only
    def finalize(self, status):
        pass


class DelayedEarlyStopping(EarlyStopping):
    """Only start early stopping monitoring after a certain number of epochs"""

    def __init__(self, delay_epochs, **kwargs):
        super().__init__(**kwargs)
        self.delay_epochs = delay_epochs

    def on_train_end(self, trainer, pl_module):
        self.wait_count = 0

    def on_validation_end(self, trainer, pl_module):
        if trainer.current_epoch < self.delay_epochs:
            return
        super().on_validation_end(trainer, pl_module)


class VectorLoggingCallback(pl.Callback):
    def __init__(self, root: Path):
        super().__init__()
        self.state = {"train": [], "val": [], "test": []}
        self.root = root

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, unused=0):
        self.state["train"].append(outputs)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, unused=0):
        self.state["val"].append(outputs)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        y_true = torch.cat([x["y_true"] for x in self.state["train"]])
        y_hat = torch.cat([x["y_hat"] for x in self.state["train"]])
        self.log_vectors(y_true, y_hat, "train", pl_module)
        self.state["train"] = []

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        def log_loader(idx, name):
            y_true = torch.cat([x["y_true"] for x in [s for s in self.state["val"] if s.get("idx") == idx]])
            y_hat = torch.cat([x["y_hat"] for x in [s for s in self.state["val"] if s.get("idx") == idx]])
            self.log_vectors(y_true, y_hat, name, pl_module)

        for idx, name in zip([0, 1], ["val", "test"], strict=True):
            log_loader(idx, name)
        self.state["val"] = []

    def log_vectors(self, y_true, y_hat, prefix, model):
        log_dest = self.root / str(model.current_epoch)
        make_dir(log_dest)
        for metric in [key for key in model.vector_metrics.keys() if str(prefix) in key]:
            metric_res = model.vector_metrics[metric](y_hat.cpu(), y_true.cpu().int())
            save_obj(metric_res, log_dest / str(metric + ".pkl"))


def build_scalar_metrics():
    return {
        "accuracy": torchmetrics.Accuracy(threshold=0.5, task="binary"),
        "f1": torchmetrics.F1Score(task="binary"),
        "auroc": torchmetrics.AUROC(task="binary"),
    }


def build_vector_metrics():
    return {
        "roc": torchmetrics.ROC(task="binary"),
        "confusion_matrix": torchmetrics.ConfusionMatrix(task="binary"),
    }


class TransformerModel(pl.LightningModule):
    def __init__(self, seq_len, n_tokens, embedding_size, n_attn_heads, enc_ff_hidden, ff_hidden, dropout, pad_num,
                 batch_size, warmup_steps, start_learning_rate=0.001, peak_learning_rate=0.01, weight_decay=0.01,
                 loss_fn=nn.BCELoss(), scalar_metrics={}, vector_metrics={}):  # noqa: B006, B008 - the project's
        super().__init__()
        self.pos_encoder = nn.Identity()
        encoder_layers = TransformerEncoderLayer(embedding_size, n_attn_heads, enc_ff_hidden, dropout, batch_first=True)
        self.transformer_encoder = TransformerEncoder(encoder_layer=encoder_layers, num_layers=1,
                                                      enable_nested_tensor=False)
        self.embedding_size = embedding_size
        self.embedding = nn.Embedding(n_tokens, self.embedding_size)
        self.feedforward = nn.Sequential(nn.Linear(embedding_size * seq_len, ff_hidden), nn.ReLU(),
                                         nn.Linear(ff_hidden, 1), nn.Sigmoid())
        self.loss_fn = loss_fn
        self.start_learning_rate, self.peak_learning_rate = start_learning_rate, peak_learning_rate
        self.weight_decay, self.pad_num, self.batch_size = weight_decay, pad_num, batch_size
        self.warmup_steps = warmup_steps
        self.init_metrics(scalar_metrics, vector_metrics)

    def init_metrics(self, scalar_metrics, vector_metrics):
        def split_metric_builder(metrics):
            return {f"{prefix}_{name}": metric for prefix in ("train", "val", "test")
                    for name, metric in metrics.items()}

        self.scalar_metrics = split_metric_builder(scalar_metrics)
        self.vector_metrics = split_metric_builder(vector_metrics)

    def forward(self, data, src_padding_mask) -> torch.Tensor:
        src = data[0]
        src = self.embedding(src) * math.sqrt(self.embedding_size)
        src = self.pos_encoder(src)
        src = self.transformer_encoder(src, src_key_padding_mask=src_padding_mask)
        output = self.feedforward(src.view(src.size(0), -1))
        return output.double()

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.start_learning_rate, weight_decay=self.weight_decay)
        scheduler = {
            "scheduler": NoamScheduler(optimizer, self.peak_learning_rate, warmup_steps=self.warmup_steps),
            "interval": "step",
        }
        return [optimizer], [scheduler]

    def compute_metrics(self, prefix, y_pred, y_true):
        for metric in [key for key in self.scalar_metrics.keys() if prefix in key]:
            self.log(f"{metric}", self.scalar_metrics[metric](y_pred.cpu(), y_true.int()).float(), sync_dist=True,
                     on_epoch=True, on_step=False)

    def generate_padding_mask(self, batch):
        return batch[0] == self.pad_num

    def step(self, batch, name):
        src_padding_mask = self.generate_padding_mask(batch)
        y_hat = self(batch, src_padding_mask)
        loss = self.loss_fn(y_hat, batch[1].view(-1, 1).double())
        self.log(f"{name}_loss", loss, batch_size=batch[0].shape[0], sync_dist=True, on_epoch=True, on_step=False)
        y_true = torch.Tensor(Binarizer(threshold=0.5).transform(batch[1].view(-1, 1).double().cpu()))
        self.compute_metrics(name, y_hat, y_true)
        return loss, y_hat, y_true

    def training_step(self, batch, batch_idx):
        loss, y_hat, y_true = self.step(batch, "train")
        return {"loss": loss, "y_hat": y_hat, "y_true": y_true}

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        loss, y_hat, y_true = self.step(batch, "val")
        return {"loss": loss, "y_hat": y_hat, "y_true": y_true, "idx": dataloader_idx}


# ------------------------------------------------------------------------------------------------ the script
def peptides(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 21, (n, 12), generator=generator)
    x[:, 9:] = 0  # padding
    return TensorDataset(x, (x[:, 0] > 10).float())


def main():
    args = parse_args(__doc__)
    pl.seed_everything(0)
    root = Path(args.root)
    train_loader = DataLoader(peptides(64, 1), batch_size=16, shuffle=True)
    val_loader, test_loader = DataLoader(peptides(32, 2), batch_size=16), DataLoader(peptides(32, 3), batch_size=16)
    model = TransformerModel(seq_len=12, n_tokens=22, embedding_size=8, n_attn_heads=2, enc_ff_hidden=16, ff_hidden=8,
                             dropout=0.1, pad_num=0, batch_size=16, warmup_steps=4,
                             scalar_metrics=build_scalar_metrics(), vector_metrics=build_vector_metrics())
    csv_logger = pl_loggers.CSVLogger(save_dir=root / "csv", name="aegis")
    curves = CurveLogger()
    early = DelayedEarlyStopping(delay_epochs=1, monitor="val_loss/dataloader_idx_0", min_delta=0.0, patience=5,
                                 verbose=False, mode="min")
    options = dict(trainer_kwargs(args), default_root_dir=str(root))
    trainer = pl.Trainer(
        **options, num_nodes=1, max_epochs=3, min_steps=2,
        callbacks=[
            ModelCheckpoint(dirpath=root / "checkpoints", save_weights_only=False, mode="min",
                            monitor="val_loss/dataloader_idx_0", save_last=True),
            early,
            VectorLoggingCallback(root=root / "vectors"),
        ],
        logger=[csv_logger, curves], log_every_n_steps=1, benchmark=False, check_val_every_n_epoch=1,
        enable_progress_bar=False,
    )
    trainer.fit(model, train_loader, val_dataloaders=[val_loader, test_loader])

    expect(trainer.global_step == 12 and trainer.current_epoch == 3, f"{trainer.global_step} {trainer.current_epoch}")
    val_losses = [m["val_loss/dataloader_idx_0"] for m in curves.received if "val_loss/dataloader_idx_0" in m]
    expect(len(val_losses) == 3 and all(isinstance(v, float) for v in val_losses), f"CurveLogger got {val_losses}")
    expect(any("train_auroc" in m for m in curves.received) and any("val_f1/dataloader_idx_1" in m
                                                                     for m in curves.received),
           f"CurveLogger got {sorted(set().union(*curves.received))}")
    # float64 losses keep their precision in the callbacks, as in Lightning
    watched = min(val_losses[1:])  # the delayed check starts at epoch 1
    expect(early.best_score.dtype == torch.float64 and early.best_score.item() == watched,
           f"best_score {early.best_score!r}, expected {watched!r}")
    best = trainer.checkpoint_callback.best_model_score
    expect(best.dtype == torch.float64 and best.item() == min(val_losses), f"best_model_score {best!r}")
    expect(early.wait_count == 0, f"the subclass's on_train_end sets wait_count to 0: {early.wait_count}")
    # the Noam schedule stepped once a batch: its rate for step 12
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    noam = 0.001 * 0.01**-0.5 * min(13**-0.5, 13 * 4**-1.5)
    expect(math.isclose(lr, noam, rel_tol=1e-9), f"lr {lr} after 12 steps, Noam gives {noam}")
    for epoch in range(3):
        found = sorted(os.listdir(root / "vectors" / str(epoch)))
        expect(found == sorted(f"{p}_{m}.pkl" for p in ("train", "val", "test") for m in ("roc", "confusion_matrix")),
               f"epoch {epoch}: {found}")
    with open(root / "vectors" / "2" / "test_confusion_matrix.pkl", "rb") as handle:
        matrix = pickle.load(handle)
    expect(int(matrix.sum()) == 32, f"the test loader's confusion matrix counts {int(matrix.sum())} of 32")
    expect(sorted(os.listdir(root / "checkpoints"))[-1] == "last.ckpt", str(os.listdir(root / "checkpoints")))
    ok("user_transformer_curves")


if __name__ == "__main__":
    main()
