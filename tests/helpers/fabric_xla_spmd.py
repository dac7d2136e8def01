"""A Fabric loop with ``strategy="xla_spmd"`` on every PJRT CPU device (one process), then the same loop in plain
torch on the CPU with the whole batch: ``python fabric_xla_spmd.py OUT`` writes OUT (JSON) with the largest weight
difference, the gradient norms ``clip_gradients`` returned and plain torch's, whether a ``save``/``load`` round trip
restored the model, the first batch's sharding and shapes, and the strategy's topology. Run by
tests/test_fabric_processes.py in a process of its own (the CPU reference runs after torch_xla's first use: a CPU
backward pass before it breaks XLA autograd in that process)."""

from __future__ import annotations

import json
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelkit import Fabric

BATCH, SAMPLES, LR, MOMENTUM, EPOCHS = 16, 64, 0.05, 0.9, 3


def dataset() -> TensorDataset:
    """64 samples of a noisy linear target in 8 dimensions; deterministic."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 8, generator=gen)
    w = torch.randn(8, 1, generator=gen)
    return TensorDataset(x, (x @ w).squeeze(-1) + 0.1 * torch.randn(SAMPLES, generator=gen))


def build() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1), nn.Flatten(0))


def spmd() -> tuple[dict[str, torch.Tensor], dict]:
    """Train through Fabric on the mesh; return the weights (on the CPU) and what was seen of the batches."""
    import torch_xla

    fabric = Fabric(accelerator="xla", strategy="xla_spmd", devices="auto")
    fabric.launch()
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(dataset(), batch_size=BATCH))
    seen: dict = {}
    for _ in range(EPOCHS):
        for x, y in loader:
            if not seen:
                seen = {"shardings": [torch_xla._XLAC._get_xla_sharding_spec(t) for t in (x, y)],
                        "shapes": [list(x.shape), list(y.shape)], "device": str(x.device)}
            optimizer.zero_grad()
            fabric.backward(nn.functional.mse_loss(model(x), y))
            seen.setdefault("norms", []).append(float(fabric.clip_gradients(model, optimizer, max_norm=1e6)))
            optimizer.step()
    path = sys.argv[1] + ".ckpt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": EPOCHS * len(loader)})
    fresh = build()
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=LR, momentum=MOMENTUM)
    fresh, fresh_optimizer = fabric.setup(fresh, fresh_optimizer)
    state = {"model": fresh, "optimizer": fresh_optimizer, "step": 0}
    fabric.load(path, state)
    pairs = zip(model.state_dict().values(), fresh.state_dict().values(), strict=True)
    seen["restored"] = state["step"] == EPOCHS * len(loader) and all(torch.equal(a.cpu(), b.cpu()) for a, b in pairs)
    seen.update(strategy=type(fabric.strategy).__name__, world_size=fabric.world_size,
                mesh_shape=list(fabric.strategy.mesh.mesh_shape), batches=len(loader))
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, seen


def reference() -> tuple[dict[str, torch.Tensor], list[float]]:
    """Plain torch on the CPU, one device, the whole batch: the weights and each step's gradient norm."""
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    norms = []
    for _ in range(EPOCHS):
        for x, y in DataLoader(dataset(), batch_size=BATCH):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), 1e6)))
            optimizer.step()
    return {k: v.detach() for k, v in model.state_dict().items()}, norms


def main() -> None:
    weights, seen = spmd()
    expected, seen["expected_norms"] = reference()
    initial = build().state_dict()
    assert weights.keys() == expected.keys(), (sorted(weights), sorted(expected))
    seen["max_diff"] = max(float((weights[k] - expected[k]).abs().max()) for k in weights)
    seen["trained"] = max(float((expected[k] - initial[k]).abs().max()) for k in expected)
    with open(sys.argv[1], "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
