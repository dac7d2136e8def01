"""(z10) The GLUE fine-tuning notebook of Lightning's tutorials (Lightning-AI/tutorials, CC BY-SA 4.0:
``lightning_examples/text-transformers/text-transformers.py``), re-written in our own words with the features it
uses: a DataModule with ``prepare_data`` and ``setup(stage)`` whose task (MNLI) has two validation splits, so
``val_dataloader`` returns a list of loaders; ``validation_step(batch, batch_idx, dataloader_idx=0)`` collecting
outputs per loader in a ``defaultdict(list)``, reduced in ``on_validation_epoch_end`` into ``val_loss_{split}`` and a
``self.log_dict`` of the metric's results per split; ``save_hyperparameters()``; AdamW with a no-weight-decay
parameter group for biases and norms; a linear warm-up schedule sized by ``self.trainer.estimated_stepping_batches``
and stepped every optimizer step (``"interval": "step", "frequency": 1``).

Stand-ins: the Hugging Face model, tokenizer, ``datasets`` and ``evaluate`` (none installed here) become an
embedding-bag classifier over random token ids whose label is a token's presence, a hand-written linear warm-up
``LambdaLR`` and torchmetrics' accuracy and F1; ``accumulate_grad_batches=2`` is added (not in the notebook) so that
``estimated_stepping_batches`` has something to divide; 2 epochs. Only the imports point at accelkit.
"""

from collections import defaultdict

import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.functional import accuracy, f1_score

import accelkit as L  # was: import lightning as L


def linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def factor(step):
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))
    return LambdaLR(optimizer, factor)


class GLUEDataModule(L.LightningDataModule):
    loader_columns = ["input_ids", "labels"]

    def __init__(self, task_name="mnli", max_seq_length=12, train_batch_size=16, eval_batch_size=32):
        super().__init__()
        self.task_name, self.max_seq_length = task_name, max_seq_length
        self.train_batch_size, self.eval_batch_size = train_batch_size, eval_batch_size
        self.num_labels = 2
        self.prepared = 0

    def prepare_data(self):
        self.prepared += 1  # the notebook downloads the data set and the tokenizer here

    def setup(self, stage):
        def split(n, seed):
            generator = torch.Generator().manual_seed(seed)
            ids = torch.randint(1, 50, (n, self.max_seq_length), generator=generator)
            labels = torch.randint(0, 2, (n,), generator=generator)
            ids[labels == 1, 0] = 0  # token 0 marks the positive class
            return TensorDataset(ids, labels)

        self.dataset = {"train": split(320, 0), "validation_matched": split(64, 1),
                        "validation_mismatched": split(64, 2)}
        self.eval_splits = [x for x in self.dataset if "validation" in x]

    def train_dataloader(self):
        return DataLoader(self.dataset["train"], batch_size=self.train_batch_size, shuffle=True)

    def val_dataloader(self):
        if len(self.eval_splits) == 1:
            return DataLoader(self.dataset["validation"], batch_size=self.eval_batch_size)
        return [DataLoader(self.dataset[x], batch_size=self.eval_batch_size) for x in self.eval_splits]


class GLUETransformer(L.LightningModule):
    def __init__(self, num_labels, task_name, learning_rate=5e-2, adam_epsilon=1e-8, warmup_steps=2,
                 weight_decay=0.01, eval_splits=None):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.EmbeddingBag(50, 16)
        self.norm = nn.LayerNorm(16)
        self.classifier = nn.Linear(16, num_labels)
        self.outputs = defaultdict(list)
        self.scheduler_steps = []

    def forward(self, input_ids, labels=None):
        logits = self.classifier(self.norm(self.embed(input_ids)))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits

    def training_step(self, batch, batch_idx):
        loss, _ = self(*batch)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        val_loss, logits = self(*batch)
        self.outputs[dataloader_idx].append({"loss": val_loss, "preds": logits.argmax(dim=1), "labels": batch[1]})

    def compute_metric(self, preds, labels):
        return {"accuracy": accuracy(preds, labels, task="binary"), "f1": f1_score(preds, labels, task="binary")}

    def on_validation_epoch_end(self):
        for i, outputs in self.outputs.items():
            split = self.hparams.eval_splits[i].split("_")[-1]
            preds = torch.cat([x["preds"] for x in outputs])
            labels = torch.cat([x["labels"] for x in outputs])
            loss = torch.stack([x["loss"] for x in outputs]).mean()
            self.log(f"val_loss_{split}", loss, prog_bar=True)
            split_metrics = {f"{k}_{split}": v for k, v in self.compute_metric(preds, labels).items()}
            self.log_dict(split_metrics, prog_bar=True)
        self.outputs.clear()

    def configure_optimizers(self):
        no_decay = ["bias", "norm.weight"]
        grouped = [
            {"params": [p for n, p in self.named_parameters() if not any(nd in n for nd in no_decay)],
             "weight_decay": self.hparams.weight_decay},
            {"params": [p for n, p in self.named_parameters() if any(nd in n for nd in no_decay)],
             "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(grouped, lr=self.hparams.learning_rate, eps=self.hparams.adam_epsilon)
        self.total_steps = self.trainer.estimated_stepping_batches
        scheduler = linear_schedule_with_warmup(optimizer, num_warmup_steps=self.hparams.warmup_steps,
                                                num_training_steps=self.total_steps)
        return [optimizer], [{"scheduler": scheduler, "interval": "step", "frequency": 1}]

    def lr_scheduler_step(self, scheduler, metric):
        scheduler.step()
        self.scheduler_steps.append(self.trainer.global_step)


def main():
    args = parse_args(__doc__)
    L.seed_everything(42)
    dm = GLUEDataModule(task_name="mnli")
    dm.setup("fit")
    model = GLUETransformer(num_labels=dm.num_labels, eval_splits=dm.eval_splits, task_name=dm.task_name)
    trainer = L.Trainer(max_epochs=2, accumulate_grad_batches=2, enable_progress_bar=False, logger=False,
                        enable_checkpointing=False, **trainer_kwargs(args))
    trainer.fit(model, datamodule=dm)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    report(metrics=metrics, total_steps=model.total_steps, steps=trainer.global_step,
           scheduler_steps=model.scheduler_steps, lr=trainer.optimizers[0].param_groups[0]["lr"])
    wanted = {f"{m}_{s}" for m in ("val_loss", "accuracy", "f1") for s in ("matched", "mismatched")}
    expect(set(metrics) == wanted, f"callback_metrics: {sorted(metrics)}, wanted {sorted(wanted)}")
    expect(metrics["accuracy_matched"] > 0.75 and metrics["accuracy_mismatched"] > 0.75, f"not learnt: {metrics}")
    batches = 320 // trainer.world_size // 16
    expect(model.total_steps == 2 * batches // 2 == trainer.global_step,
           f"estimated_stepping_batches {model.total_steps}, global_step {trainer.global_step}")
    expect(model.scheduler_steps == list(range(1, trainer.global_step + 1)), f"{model.scheduler_steps}")
    expect(trainer.optimizers[0].param_groups[0]["lr"] == 0.0, "the linear schedule did not end at 0")
    expect(dm.prepared == 1, f"prepare_data ran {dm.prepared} times in this process")
    ok("user_glue_transformer")


if __name__ == "__main__":
    main()
