"""An image classifier trained with Fabric, the kind of program Lightning's Fabric image-classifier example is:
a small convolutional network, ``Adadelta`` with a step-wise learning-rate decay, ``fabric.setup`` of the model and
its optimizer, ``fabric.setup_dataloaders`` of a shuffled training loader and a test loader, ``fabric.backward``,
and the test loss and accuracy summed over the processes with ``fabric.all_reduce``.

The images are made here (8x8 noisy copies of ten class patterns, no download). Checked: the test accuracy is high,
every process ends with the same weights, and every process saw its share of the training set.
"""

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

if LIGHTNING:
    from lightning.fabric import Fabric
else:
    from accelkit import Fabric

CLASSES, TRAIN, TEST, EPOCHS = 10, 512, 128, 3


def images(count: int, seed: int) -> TensorDataset:
    patterns = torch.randn(CLASSES, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    return TensorDataset(patterns[labels] + 0.7 * torch.randn(count, 1, 8, 8, generator=generator), labels)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1),
                                      nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, CLASSES))

    def forward(self, x):
        return F.log_softmax(self.head(self.features(x)), dim=1)


def main(fabric: Fabric) -> None:
    fabric.seed_everything(7)
    model = ConvNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    model, optimizer = fabric.setup(model, optimizer)
    train_loader, test_loader = fabric.setup_dataloaders(DataLoader(images(TRAIN, 1), batch_size=32, shuffle=True),
                                                         DataLoader(images(TEST, 2), batch_size=64))
    seen = 0
    for _ in range(EPOCHS):
        model.train()
        for x, y in train_loader:
            expect(x.device == fabric.device, f"the batch is on {x.device}, not on {fabric.device}")
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            seen += len(y)
        scheduler.step()

    model.eval()
    totals = torch.zeros(3, device=fabric.device)  # summed loss, correct answers, images
    with torch.no_grad():
        for x, y in test_loader:
            output = model(x)
            totals += torch.stack([F.nll_loss(output, y, reduction="sum"), (output.argmax(1) == y).sum(),
                                   torch.tensor(float(len(y)), device=fabric.device)])
    totals = fabric.all_reduce(totals, reduce_op="sum")
    test_loss, accuracy = (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()
    expect(totals[2].item() >= TEST, f"the processes tested {totals[2].item()} images, not all {TEST}")
    expect(seen == EPOCHS * TRAIN // fabric.world_size, f"rank {fabric.global_rank} trained on {seen} images")
    expect(accuracy > 0.9, f"the test accuracy is {accuracy}")

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = fabric.all_gather(weights)
    if fabric.world_size > 1:
        expect(all(torch.equal(gathered[0], other) for other in gathered[1:]), "the processes' weights differ")
    report(fabric, test_loss=test_loss, accuracy=accuracy, weight_sum=weights.sum().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric)
    ok("image_classifier", fabric)
