"""(z4) The variational autoencoder of Lightning's model zoo (Lightning-Universe/lightning-bolts, Apache-2.0:
``src/pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py``), re-written in our own words with the features
it uses: ``save_hyperparameters()`` of plain numbers and strings, ``torch.distributions.Normal`` with ``rsample`` for
the reparameterisation, a KL term from the two log-probabilities, one ``step`` returning the loss and a dict of logs,
``self.log_dict({f"train_{k}": v ...}, on_step=True, on_epoch=False)`` in training and
``self.log_dict({f"val_{k}": v ...})`` in validation, a ``ModelCheckpoint`` on ``val_loss``, then
``VAE.load_from_checkpoint(best)`` rebuilding the module from its stored hyper-parameters alone.

Stand-ins: CIFAR10's ResNet encoder becomes two linear layers over 64-dimensional vectors drawn near a 4-dimensional
subspace, 4 epochs. Only the imports point at accelkit.
"""

import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit.callbacks import ModelCheckpoint  # was: from lightning.pytorch.callbacks import ModelCheckpoint


class VAE(L.LightningModule):
    def __init__(self, input_dim=64, enc_type="mlp", enc_out_dim=32, kl_coeff=0.1, latent_dim=4, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(input_dim, enc_out_dim), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(latent_dim, enc_out_dim), nn.ReLU(), nn.Linear(enc_out_dim, input_dim))
        self.fc_mu = nn.Linear(enc_out_dim, latent_dim)
        self.fc_var = nn.Linear(enc_out_dim, latent_dim)

    def forward(self, x):
        x = self.encoder(x)
        mu, log_var = self.fc_mu(x), self.fc_var(x)
        _, _, z = self.sample(mu, log_var)
        return self.decoder(z)

    def sample(self, mu, log_var):
        std = torch.exp(log_var / 2)
        p = torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(std))
        q = torch.distributions.Normal(mu, std)
        return p, q, q.rsample()

    def step(self, batch, batch_idx):
        (x,) = batch
        hidden = self.encoder(x)
        p, q, z = self.sample(self.fc_mu(hidden), self.fc_var(hidden))
        x_hat = self.decoder(z)
        recon_loss = F.mse_loss(x_hat, x, reduction="mean")
        kl = (q.log_prob(z) - p.log_prob(z)).mean() * self.hparams.kl_coeff
        loss = kl + recon_loss
        return loss, {"recon_loss": recon_loss, "kl": kl, "loss": loss}

    def training_step(self, batch, batch_idx):
        loss, logs = self.step(batch, batch_idx)
        self.log_dict({f"train_{k}": v for k, v in logs.items()}, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, logs = self.step(batch, batch_idx)
        self.log_dict({f"val_{k}": v for k, v in logs.items()})
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def make_data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    basis = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    points = torch.randn(n, 4, generator=generator) @ basis
    return TensorDataset(points + 0.05 * torch.randn(n, 64, generator=generator))


def main():
    args = parse_args(__doc__)
    L.seed_everything(1234)
    model = VAE(kl_coeff=0.05, lr=3e-3)
    checkpoint = ModelCheckpoint(monitor="val_loss")
    trainer = L.Trainer(max_epochs=4, callbacks=[checkpoint], enable_progress_bar=False, log_every_n_steps=5,
                        **trainer_kwargs(args))
    trainer.fit(model, DataLoader(make_data(512, 1), batch_size=32, shuffle=True),
                DataLoader(make_data(128, 2), batch_size=32))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    report(metrics=metrics, steps=trainer.global_step, best=checkpoint.best_model_path.split("/")[-1],
           best_score=checkpoint.best_model_score)
    wanted = {"train_recon_loss", "train_kl", "train_loss", "val_recon_loss", "val_kl", "val_loss"}
    expect(wanted <= set(metrics), f"callback_metrics: {sorted(metrics)}")
    expect(metrics["val_recon_loss"] < float(make_data(128, 2).tensors[0].var()), f"nothing learnt: {metrics}")
    restored = VAE.load_from_checkpoint(checkpoint.best_model_path)
    expect(dict(restored.hparams) == dict(model.hparams), f"{dict(restored.hparams)} != {dict(model.hparams)}")
    best = torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=True)
    for name, tensor in restored.state_dict().items():
        expect(torch.equal(tensor, best["state_dict"][name]), f"{name} differs from the checkpoint's")
    ok("user_bolts_vae")


if __name__ == "__main__":
    main()
