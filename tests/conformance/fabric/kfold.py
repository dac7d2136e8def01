"""K-fold cross-validation with Fabric, the kind of program Lightning's Fabric k-fold example is: one model and
optimizer per fold, each set up with ``fabric.setup``; every epoch each fold's model trains on the other folds'
samples and is evaluated on its own, the samples picked by ``SubsetRandomSampler`` loaders that
``fabric.setup_dataloaders`` shards over the processes; the validation accuracy averaged over folds and processes.

The data is made here (three Gaussian classes in 10 dimensions). Checked: the mean validation accuracy is high,
each process sees its share of every fold's samples, and every process ends with the same weights.
"""

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

if LIGHTNING:
    from lightning.fabric import Fabric
else:
    from accelkit import Fabric

FOLDS, SAMPLES, EPOCHS, BATCH = 4, 240, 2, 16


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(4)
    labels = torch.randint(0, 3, (SAMPLES,), generator=generator)
    centres = 0.8 * torch.randn(3, 10, generator=generator)
    return TensorDataset(centres[labels] + torch.randn(SAMPLES, 10, generator=generator), labels)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))


def main(fabric: Fabric) -> None:
    fabric.seed_everything(21)
    data = dataset()
    folds = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(0)).chunk(FOLDS)
    models = [make_model() for _ in range(FOLDS)]
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.1) for model in models]
    for fold in range(FOLDS):
        models[fold], optimizers[fold] = fabric.setup(models[fold], optimizers[fold])

    accuracies = []
    for _ in range(EPOCHS):
        epoch_accuracy = []
        for fold, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            train_ids = torch.cat([ids for other, ids in enumerate(folds) if other != fold]).tolist()
            train_loader, val_loader = fabric.setup_dataloaders(
                DataLoader(data, batch_size=BATCH, sampler=SubsetRandomSampler(train_ids)),
                DataLoader(data, batch_size=BATCH, sampler=SubsetRandomSampler(folds[fold].tolist())))
            model.train()
            trained = 0
            for x, y in train_loader:
                optimizer.zero_grad()
                fabric.backward(F.cross_entropy(model(x), y))
                optimizer.step()
                trained += len(y)
            expect(abs(trained - len(train_ids) / fabric.world_size) < fabric.world_size,
                   f"fold {fold}: rank {fabric.global_rank} trained on {trained} of {len(train_ids)} samples")
            model.eval()
            counts = torch.zeros(2, device=fabric.device)
            with torch.no_grad():
                for x, y in val_loader:
                    counts += torch.stack([(model(x).argmax(1) == y).sum().float(),
                                           torch.tensor(float(len(y)), device=fabric.device)])
            counts = fabric.all_reduce(counts, reduce_op="sum")
            epoch_accuracy.append((counts[0] / counts[1]).item())
        accuracies.append(sum(epoch_accuracy) / FOLDS)
        fabric.print(f"mean validation accuracy over {FOLDS} folds: {accuracies[-1]:.4f}")

    expect(accuracies[-1] > 0.7, f"the mean validation accuracy is {accuracies[-1]}")
    weights = torch.cat([p.detach().flatten() for model in models for p in model.parameters()])
    gathered = fabric.all_gather(weights)
    if fabric.world_size > 1:
        expect(all(torch.equal(gathered[0], other) for other in gathered[1:]), "the processes' weights differ")
    report(fabric, first_epoch_accuracy=accuracies[0], accuracy=accuracies[-1], weight_sum=weights.sum().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric)
    ok("kfold", fabric)
