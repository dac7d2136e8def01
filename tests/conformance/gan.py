"""(b) A GAN with manual optimization: two optimizers, ``self.optimizers()``, ``manual_backward``,
``toggle_optimizer``/``untoggle_optimizer`` and ``clip_gradients``.

The generator learns to move its samples towards real data drawn from N(4, 0.5). Written as a Lightning
user writes it; only the imports point at accelkit.
"""

import math

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L

LATENT, SAMPLES, BATCH, EPOCHS, CLIP = 8, 256, 32, 3, 0.5


class Generator(nn.Module):
    def __init__(self, latent_dim: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent_dim, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class GAN(L.LightningModule):
    def __init__(self, root: str, latent_dim: int = LATENT, lr: float = 0.02):
        super().__init__()
        self.automatic_optimization = False
        self.generator = Generator(latent_dim)
        self.discriminator = Discriminator()
        self.latent_dim, self.lr, self.root = latent_dim, lr, root
        self.batches = 0

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch):  # Lightning accepts a training_step without batch_idx
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], self.latent_dim, device=self.device)
        ones = torch.ones(real.shape[0], 1, device=self.device)
        zeros = torch.zeros(real.shape[0], 1, device=self.device)

        # generator: make the discriminator call its samples real
        self.toggle_optimizer(opt_g)
        frozen_while_g = all(not p.requires_grad for p in self.discriminator.parameters())
        fake = self(z)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        self.manual_backward(g_loss)
        self.clip_gradients(opt_g, gradient_clip_val=CLIP, gradient_clip_algorithm="norm")
        g_norm = torch.norm(torch.stack([p.grad.norm() for p in self.generator.parameters()])).item()
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        restored = all(p.requires_grad for p in self.discriminator.parameters())

        # discriminator: tell real from generated
        self.toggle_optimizer(opt_d)
        real_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
        fake_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        d_loss = (real_loss + fake_loss) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

        self.batches += 1
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)
        append(self.root, "steps", self.global_rank, {"frozen_while_g": frozen_while_g, "restored": restored,
                                                      "g_norm": g_norm, "finite": bool(torch.isfinite(d_loss))})

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        return [opt_g, opt_d], []

    def on_train_end(self):
        write(self.root, "train_end", self.global_rank, {"batches": self.batches,
                                                         "global_step": self.trainer.global_step})


def main():
    args = parse_args(__doc__)
    L.seed_everything(0)
    real = 4 + 0.5 * torch.randn(SAMPLES, 1, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(real), batch_size=BATCH, shuffle=True)
    model = GAN(args.root)
    z = torch.randn(512, LATENT, generator=torch.Generator().manual_seed(123))
    with torch.no_grad():
        before = model(z).mean().item()

    # Two networks stepped in turn leave parameters without gradients in each backward; under DDP a Lightning
    # user selects the strategy variant that allows that.
    kwargs = trainer_kwargs(args)
    if kwargs["strategy"] in ("ddp", "ddp_spawn", "ddp_fork"):
        kwargs["strategy"] += "_find_unused_parameters_true"
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, **kwargs)
    trainer.fit(model, loader)

    with torch.no_grad():
        after = model(z).mean().item()
    expect(abs(after - 4) < abs(before - 4) - 1.0, f"generated mean did not approach 4: {before:.3f} -> {after:.3f}")
    for name in ("g_loss", "d_loss"):
        expect(name in trainer.callback_metrics, f"{name} missing from callback_metrics")

    world = args.devices
    batches = EPOCHS * math.ceil(SAMPLES / world / BATCH)
    ends, steps = read(args.root, "train_end"), read(args.root, "steps")
    expect(sorted(ends) == list(range(world)), f"on_train_end ran on ranks {sorted(ends)}")
    for rank in range(world):
        expect(ends[rank]["batches"] == batches, f"rank {rank}: {ends[rank]['batches']} batches, not {batches}")
        # Lightning counts every optimizer.step() of manual optimization: two per batch here
        expect(ends[rank]["global_step"] == 2 * batches, f"rank {rank}: global_step {ends[rank]['global_step']}, "
                                                          f"expected {2 * batches} (two optimizer steps a batch)")
        expect(all(s["frozen_while_g"] for s in steps[rank]), "toggle_optimizer(opt_g) left D trainable")
        expect(all(s["restored"] for s in steps[rank]), "untoggle_optimizer(opt_g) did not restore requires_grad")
        expect(max(s["g_norm"] for s in steps[rank]) <= CLIP + 1e-4, "clip_gradients did not clip the norm")
        expect(all(s["finite"] for s in steps[rank]), "non-finite discriminator loss")
    ok("gan")


if __name__ == "__main__":
    main()
