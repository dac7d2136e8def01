"""(z9) PyTorch's sine-wave sequence prediction (pytorch/examples, BSD-3-Clause: ``time_sequence_prediction/train.py``
and ``generate_sine_wave.py``) as ported to Lightning on the PyTorch forums ("PyTorch Lightning for prediction",
discuss.pytorch.org thread 128403), re-written in our own words with the features it uses: a hand-unrolled pair of
``nn.LSTMCell`` over the sequence that keeps predicting ``future`` steps past its input; ``torch.optim.LBFGS``
under automatic optimization (the Trainer's closure is evaluated several times per step); the whole data set as one
batch; a DataModule whose ``prepare_data`` writes the data file once and whose ``setup`` loads it; a validation loss
on held-out waves; ``trainer.predict`` returning the extrapolated waves.

Stand-ins: 24 waves of 120 points (not 100 of 1000), double precision as the original, 4 epochs of one step each.
Only the imports point at accelkit.
"""

from pathlib import Path

import numpy as np
import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L


class SeqDataModule(L.LightningDataModule):
    def __init__(self, folder):
        super().__init__()
        self.path = Path(folder) / "sine_traindata.pt"

    def prepare_data(self):
        if self.path.exists():
            return
        rng = np.random.RandomState(2)
        period, length, count = 20, 120, 24
        x = np.arange(length) + rng.randint(-4 * period, 4 * period, count).reshape(count, 1)
        torch.save(torch.from_numpy(np.sin(x / 1.0 / period)), self.path)

    def setup(self, stage):
        data = torch.load(self.path)
        self.train = TensorDataset(data[3:, :-1], data[3:, 1:])
        self.test = TensorDataset(data[:3, :-1], data[:3, 1:])

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=len(self.train))

    def val_dataloader(self):
        return DataLoader(self.test, batch_size=len(self.test))

    def predict_dataloader(self):
        return DataLoader(self.test, batch_size=len(self.test))


class Sequence(L.LightningModule):
    def __init__(self, hidden=24, future=30):
        super().__init__()
        self.save_hyperparameters()
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)
        self.criterion = nn.MSELoss()
        self.calls = 0

    def forward(self, input, future=0):
        outputs = []
        n = input.size(0)
        h_t = torch.zeros(n, self.hparams.hidden, dtype=input.dtype, device=input.device)
        c_t, h_t2, c_t2 = torch.zeros_like(h_t), torch.zeros_like(h_t), torch.zeros_like(h_t)
        output = None
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)

    def training_step(self, batch, batch_idx):
        self.calls += 1
        input, target = batch
        loss = self.criterion(self(input), target)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        input, target = batch
        self.log("val_loss", self.criterion(self(input), target))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        input, _ = batch
        return self(input, future=self.hparams.future)

    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.8, max_iter=5)


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    torch.set_default_dtype(torch.float64)
    datamodule = SeqDataModule(args.root)
    model = Sequence()
    trainer = L.Trainer(max_epochs=4, enable_progress_bar=False, logger=False, enable_checkpointing=False,
                        num_sanity_val_steps=0, **trainer_kwargs(args))
    trainer.validate(model, datamodule=datamodule)
    first = float(trainer.callback_metrics["val_loss"])
    trainer.fit(model, datamodule=datamodule)
    last = float(trainer.callback_metrics["val_loss"])
    predictions = trainer.predict(model, datamodule=datamodule, return_predictions=True)
    report(val_loss=[first, last], calls=model.calls, steps=trainer.global_step,
           predictions=[p[:, -1] for p in predictions])
    expect(last < first, f"the validation loss did not fall: {first} -> {last}")
    expect(trainer.global_step == 4, f"global_step {trainer.global_step}: one LBFGS step per batch wanted")
    expect(model.calls > trainer.global_step, f"training_step ran {model.calls} times: LBFGS re-evaluates it")
    expect(len(predictions) == 1 and predictions[0].shape[1] == 119 + 30, f"{[p.shape for p in predictions]}")
    expect(predictions[0].dtype == torch.float64, f"dtype {predictions[0].dtype}")
    ok("user_sine_lbfgs")


if __name__ == "__main__":
    main()
