"""(z7) A WGAN with gradient penalty (eriklindernoren/PyTorch-GAN, MIT licence: ``implementations/wgan_gp/wgan_gp.py``)
as users port it to Lightning's manual optimization, re-written in our own words with the features it uses:
``automatic_optimization = False``, two optimizers from ``self.optimizers()``, the critic trained every batch and the
generator every ``n_critic`` batches, each inside ``toggle_optimizer``/``untoggle_optimizer``; the penalty computed
with ``torch.autograd.grad(..., create_graph=True)`` on interpolated samples so that ``self.manual_backward`` goes
through a second derivative; ``self.log_dict(..., prog_bar=True)``; Adam with ``betas=(0.5, 0.9)`` per network,
built from ``self.hparams``.

Stand-ins: the images become points of N(3, 0.5) in 2 dimensions, the networks two small MLPs, 5 epochs. Only the
imports point at accelkit.
"""

import torch
from _cli import expect, ok, parse_args, report, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L


def mlp(n_in, n_out):
    return nn.Sequential(nn.Linear(n_in, 32), nn.LeakyReLU(0.2), nn.Linear(32, n_out))


class WGANGP(L.LightningModule):
    def __init__(self, latent_dim=4, lr=2e-3, b1=0.5, b2=0.9, lambda_gp=10.0, n_critic=3):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = mlp(latent_dim, 2)
        self.critic = mlp(2, 1)
        self.generator_steps = 0

    def forward(self, z):
        return self.generator(z)

    def gradient_penalty(self, real, fake):
        alpha = torch.rand(real.size(0), 1, device=real.device)
        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        scores = self.critic(interpolates)
        gradients = torch.autograd.grad(outputs=scores, inputs=interpolates, grad_outputs=torch.ones_like(scores),
                                        create_graph=True, retain_graph=True, only_inputs=True)[0]
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_c = self.optimizers()
        z = torch.randn(real.size(0), self.hparams.latent_dim, device=real.device)

        self.toggle_optimizer(opt_c)
        fake = self(z).detach()
        penalty = self.gradient_penalty(real, fake)
        c_loss = -self.critic(real).mean() + self.critic(fake).mean() + self.hparams.lambda_gp * penalty
        opt_c.zero_grad()
        self.manual_backward(c_loss)
        opt_c.step()
        self.untoggle_optimizer(opt_c)
        logs = {"c_loss": c_loss, "gp": penalty}

        if batch_idx % self.hparams.n_critic == 0:
            self.toggle_optimizer(opt_g)
            g_loss = -self.critic(self(z)).mean()
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            opt_g.step()
            self.untoggle_optimizer(opt_g)
            self.generator_steps += 1
            logs["g_loss"] = g_loss
        self.log_dict(logs, prog_bar=True)

    def configure_optimizers(self):
        betas = (self.hparams.b1, self.hparams.b2)
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=betas)
        opt_c = torch.optim.Adam(self.critic.parameters(), lr=self.hparams.lr, betas=betas)
        return [opt_g, opt_c], []


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    real = 3.0 + 0.5 * torch.randn(1536, 2, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(real), batch_size=64, shuffle=True)
    model = WGANGP()
    with torch.no_grad():
        before = model(torch.randn(512, 4)).mean(0)
    trainer = L.Trainer(max_epochs=5, enable_progress_bar=False, logger=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(model, loader)
    with torch.no_grad():
        after = model(torch.randn(512, 4)).mean(0)
    report(before=before, after=after, steps=trainer.global_step, generator_steps=model.generator_steps,
           metrics={k: float(v) for k, v in trainer.callback_metrics.items()})
    batches = 5 * len(loader)
    # one step per optimizer.step(): every batch the critic's, every n_critic-th the generator's too (as Lightning)
    expect(model.generator_steps == 5 * -(-len(loader) // 3), f"generator steps: {model.generator_steps}")
    expect(trainer.global_step == batches + model.generator_steps, f"global_step: {trainer.global_step}")
    expect((after - 3.0).abs().max() < (before - 3.0).abs().max(), f"the samples did not move to 3: {after}")
    expect({"c_loss", "gp", "g_loss"} <= set(trainer.callback_metrics), f"{sorted(trainer.callback_metrics)}")
    expect(all(p.requires_grad for p in model.parameters()), "untoggle_optimizer left parameters frozen")
    ok("user_wgan_gp")


if __name__ == "__main__":
    main()
