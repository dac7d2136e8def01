"""A model sharded with FSDP under Fabric, its optimizer and learning-rate scheduler made before ``fabric.setup``
(as most fine-tuning scripts do: ``fabric.setup(model, optimizer, scheduler=scheduler)``), gradients clipped with
``fabric.clip_gradients`` over the sharded gradients.

Run with ``--strategy fsdp`` on two CPU processes (and with the default strategy on one). Lightning 2.6.6 runs FSDP
on GPUs only (it refuses ``strategy="fsdp"`` with a CPU accelerator, and torch's FSDP1, which it wraps, needs an
accelerator device), so its reference for the two-process run is the same script under ``ddp``: full sharding
averages the same gradients over the same shards of the data. Checked: the scheduler
made before ``setup`` still drives the learning rate the wrapped optimizer steps with; the loss falls; the total
gradient norm ``clip_gradients`` returns is the same on every process (the norm of the whole model, not of one
shard) and clipping bounds it; the model's full state dict (gathered from the shards) is the same on every process.
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

EPOCHS, LR, MAX_NORM = 4, 0.1, 0.5


def regression() -> TensorDataset:
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(256, 16, generator=generator)
    return TensorDataset(x, torch.sin(x[:, :4]).sum(1, keepdim=True))


def main(fabric: Fabric) -> None:
    fabric.seed_everything(17)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = fabric.setup(model, optimizer, scheduler=scheduler)
    loader = fabric.setup_dataloaders(DataLoader(regression(), batch_size=32, shuffle=True))

    losses, norms = [], []
    for epoch in range(EPOCHS):
        expect(abs(optimizer.param_groups[0]["lr"] - LR * 0.5**epoch) < 1e-12,
               f"epoch {epoch}: the wrapped optimizer steps with lr {optimizer.param_groups[0]['lr']}")
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            fabric.backward(loss)
            norms.append(fabric.clip_gradients(model, optimizer, max_norm=MAX_NORM).item())
            optimizer.step()
            total += loss.item()
        scheduler.step()
        losses.append(fabric.all_reduce(torch.tensor(total / len(loader), device=fabric.device)).item())
        fabric.print(f"epoch {epoch}: loss {losses[-1]:.5f}, lr {scheduler.get_last_lr()[0]}")

    expect(losses[-1] < losses[0], f"the loss did not fall: {losses}")
    gathered_norms = fabric.all_gather(torch.tensor(norms, device=fabric.device))
    if fabric.world_size > 1:
        expect(all(torch.allclose(gathered_norms[0], other) for other in gathered_norms[1:]),
               f"clip_gradients returned different norms on the processes: {gathered_norms.tolist()}")
    state = model.state_dict()
    full = torch.cat([state[key].flatten() for key in sorted(state)])
    expect(full.numel() == sum(p.numel() for p in nn.Linear(16, 64).parameters()) + 64 * 65 + 65,
           f"the state dict holds {full.numel()} numbers, not the whole model's")
    gathered = fabric.all_gather(full)
    if fabric.world_size > 1:
        expect(all(torch.equal(gathered[0], other) for other in gathered[1:]), "the processes' state dicts differ")
    report(fabric, first_loss=losses[0], loss=losses[-1], first_grad_norm=norms[0], last_grad_norm=norms[-1],
           weight_sum=full.sum().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric)
    ok("fsdp_scheduler", fabric)
