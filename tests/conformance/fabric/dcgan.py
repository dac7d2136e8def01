"""A deep convolutional GAN trained with Fabric, the kind of program Lightning's Fabric DCGAN example is: a
transposed-convolution generator and a convolutional discriminator, each set up with its own Adam optimizer
(``fabric.setup`` called twice), the discriminator updated on real and generated images, then the generator updated
through the discriminator's judgement, each loss through ``fabric.backward``.

The "real" images are 8x8 bright squares at random places (made here, no download). Checked: both losses stay
finite, the generated images move towards the real ones' mean brightness, every process ends with the same weights.
"""

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if LIGHTNING:
    from lightning.fabric import Fabric
else:
    from accelkit import Fabric

LATENT, IMAGES, BATCH, EPOCHS = 8, 256, 32, 2


def squares(count: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(3)
    images = -torch.ones(count, 1, 8, 8)
    corners = torch.randint(0, 5, (count, 2), generator=generator)
    for image, (row, col) in zip(images, corners.tolist(), strict=True):
        image[:, row:row + 4, col:col + 4] = 1.0
    return TensorDataset(images)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(LATENT, 16, 4, 1, 0, bias=False), nn.BatchNorm2d(16), nn.ReLU(True),  # 4x4
            nn.ConvTranspose2d(16, 1, 4, 2, 1, bias=False), nn.Tanh())  # 8x8

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),  # 4x4
                                 nn.Conv2d(16, 1, 4, 1, 0, bias=False), nn.Flatten(), nn.Sigmoid())

    def forward(self, x):
        return self.net(x).view(-1)


def main(fabric: Fabric) -> None:
    fabric.seed_everything(11)
    generator, discriminator = Generator(), Discriminator()
    optimizer_g = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
    generator, optimizer_g = fabric.setup(generator, optimizer_g)
    discriminator, optimizer_d = fabric.setup(discriminator, optimizer_d)
    loader = fabric.setup_dataloaders(DataLoader(squares(IMAGES), batch_size=BATCH, shuffle=True))
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(64, LATENT, 1, 1, device=fabric.device)

    for _ in range(EPOCHS):
        for (real,) in loader:
            size = real.shape[0]
            real_label = torch.ones(size, device=fabric.device)
            fake_label = torch.zeros(size, device=fabric.device)
            # the discriminator: real images are real, generated ones are not
            discriminator.zero_grad()
            loss_d_real = criterion(discriminator(real), real_label)
            fabric.backward(loss_d_real)
            fake = generator(torch.randn(size, LATENT, 1, 1, device=fabric.device))
            loss_d_fake = criterion(discriminator(fake.detach()), fake_label)
            fabric.backward(loss_d_fake)
            optimizer_d.step()
            # the generator: have the discriminator call its images real
            generator.zero_grad()
            loss_g = criterion(discriminator(fake), real_label)
            fabric.backward(loss_g)
            optimizer_g.step()

    loss_d = (loss_d_real + loss_d_fake).detach()
    expect(torch.isfinite(loss_d) and torch.isfinite(loss_g), f"a loss is not finite: D {loss_d}, G {loss_g}")
    with torch.no_grad():
        brightness = generator(fixed_noise).mean().item()
    real_brightness = squares(IMAGES).tensors[0].mean().item()
    expect(abs(brightness - real_brightness) < 0.5, f"generated brightness {brightness} vs real {real_brightness}")
    weights = torch.cat([p.detach().flatten() for m in (generator, discriminator) for p in m.parameters()])
    gathered = fabric.all_gather(weights)
    if fabric.world_size > 1:
        expect(all(torch.equal(gathered[0], other) for other in gathered[1:]), "the processes' weights differ")
    report(fabric, loss_d=fabric.all_reduce(loss_d).item(), loss_g=fabric.all_reduce(loss_g.detach()).item(),
           brightness=brightness)


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric)
    ok("dcgan", fabric)
