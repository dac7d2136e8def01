"""(y) A user project's first LSTM (navneetkumaryadav207001/quickml, ``models/pytorch_lstm.py``): one sample per
batch, ``training_step`` calling ``self.forward`` on the sample, a one-element loss tensor, metrics logged under a
name chosen by the label (``out_0``/``out_1``), ``log_every_n_steps=2``, and the trained module called on a sample
afterwards. Unchanged but for the epochs (120 instead of 300) and a seed; only the imports point at accelkit.
"""

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: L.LightningModule


class lstm(LightningModule):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(input_size=1, hidden_size=1)

    def forward(self, input):
        input_trans = input.view(len(input), 1)
        lstm_out, temp = self.lstm(input_trans)
        prediction = lstm_out[-1]
        return prediction

    def configure_optimizers(self):
        return Adam(self.parameters(), lr=0.1)

    def training_step(self, batch, batch_idx):
        input_i, label_i = batch
        output_i = self.forward(input_i[0])
        loss = (output_i - label_i) ** 2
        self.log("train_loss", loss)
        if (label_i == 0):
            self.log("out_0", output_i)
        else:
            self.log("out_1", output_i)
        return loss


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    model = lstm()
    inputs = torch.tensor([[0., 0.5, 0.25, 1.], [1., 0.5, 0.25, 1.]])
    labels = torch.tensor([0., 1.])
    with torch.no_grad():
        before = [float(model(x)) for x in inputs]
    trainer = L.Trainer(max_epochs=120, log_every_n_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, **trainer_kwargs(args))
    dataset = TensorDataset(inputs, labels)
    dataloader = DataLoader(dataset)
    trainer.fit(model, train_dataloaders=dataloader)
    with torch.no_grad():
        after = [float(model(x)) for x in inputs]
    errors = [(abs(b - y), abs(a - y)) for b, a, y in zip(before, after, labels.tolist(), strict=True)]
    print({"before": before, "after": after})
    # one sample per rank under DDP averages the two samples' gradients, so only the total error is sure to fall
    expect(sum(a for _, a in errors) < sum(b for b, _ in errors), f"predictions did not approach the labels: {errors}")
    expect("train_loss" in trainer.callback_metrics, f"callback_metrics: {sorted(trainer.callback_metrics)}")
    ok("user_lstm")


if __name__ == "__main__":
    main()
