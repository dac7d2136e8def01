"""Gradient accumulation with Fabric's ``no_backward_sync``, as Fabric's guide writes it: the micro-batches of an
accumulation window run their backward inside ``with fabric.no_backward_sync(model, enabled=not last):`` so that only
the window's last backward averages the gradients over the processes, then the optimizer steps once.

Checked with the gradients themselves, gathered from every process after each backward: inside a window each
process holds only its own data's gradients (on two processes they differ: no synchronisation happened); after the
window's last backward every process holds the same gradient, the mean over the processes of the gradients a plain
torch copy of the model accumulates from each process's micro-batches; the weights stay equal on every process.
"""

import copy

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.nn import functional as F

if LIGHTNING:
    from lightning.fabric import Fabric
else:
    from accelkit import Fabric

WINDOWS, ACCUMULATE, BATCH = 3, 4, 4


def micro_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)  # each process its own data
    x = torch.randn(WINDOWS * ACCUMULATE, BATCH, 5, generator=generator)
    return list(zip(x, x.sum(-1, keepdim=True).tanh(), strict=True))


def gathered_grads(fabric: Fabric, model) -> torch.Tensor:
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    everyone = fabric.all_gather(grads)
    return everyone if fabric.world_size > 1 else everyone.unsqueeze(0)  # one process: returned unchanged


def main(fabric: Fabric) -> None:
    fabric.seed_everything(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))
    # plain torch, never synchronised: this process's own gradients. Moved before its optimizer is made: on a device
    # whose tensors cannot share the CPU's storage (XLA), .to() makes new parameters
    reference = copy.deepcopy(model).to(fabric.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    data = micro_batches(fabric.global_rank)
    unsynced_differ = []
    for window in range(WINDOWS):
        for step in range(ACCUMULATE):
            x, y = fabric.to_device(data[window * ACCUMULATE + step])
            last = step == ACCUMULATE - 1
            with fabric.no_backward_sync(model, enabled=not last):
                fabric.backward(F.mse_loss(model(x), y) / ACCUMULATE)
            (F.mse_loss(reference(x), y) / ACCUMULATE).backward()
            grads, own = gathered_grads(fabric, model), gathered_grads(fabric, reference)
            if not last:
                expect(torch.allclose(grads, own, atol=1e-6), f"window {window} step {step}: the gradients were "
                       "synchronised inside no_backward_sync")
                unsynced_differ.append(not torch.allclose(grads[0], grads[-1]))
            else:
                expect(all(torch.allclose(grads[0], other, atol=1e-6) for other in grads),
                       f"window {window}: the processes hold different gradients after the synchronising backward")
                expect(torch.allclose(grads[0], own.mean(0), atol=1e-6),
                       f"window {window}: the synchronised gradient is not the mean of the processes' gradients")
        optimizer.step()
        optimizer.zero_grad()
        # the reference steps with the mean over the processes too, so the next window starts from the same weights
        with torch.no_grad():
            for parameter, mean in zip(reference.parameters(), own.mean(0).split(
                    [p.numel() for p in reference.parameters()]), strict=True):
                parameter.grad.copy_(mean.view_as(parameter))
        reference_optimizer.step()
        reference_optimizer.zero_grad()
    if fabric.world_size > 1:
        expect(all(unsynced_differ), "inside a window the processes' gradients were equal: were they synchronised?")
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    expect(torch.allclose(weights, torch.cat([p.detach().flatten() for p in reference.parameters()]), atol=1e-6),
           "the model's weights differ from the plain torch loop's")
    report(fabric, weight_sum=weights.sum().item(), weight_norm=weights.norm().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric)
    ok("accumulation", fabric)
