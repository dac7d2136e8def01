"""Saving and resuming with Fabric, as the Fabric checkpoint guide and fine-tuning scripts do: ``fabric.save(path,
state)`` of a dictionary holding the model, the optimizer and plain values; ``fabric.load(path, state)`` restoring
them in place and returning what the state did not ask for; ``filter=`` to save part of a module's state dict;
``strict=False`` to load a checkpoint that lacks keys (``strict=True`` refuses with ``KeyError``); ``fabric.load(path)``
returning the whole checkpoint; ``fabric.load_raw`` of a plain ``torch.save``'d state dict.

Checked: a resumed run continues exactly as the uninterrupted one (weights equal after the same further steps),
the plain values come back, filtered checkpoints hold only the kept keys, and every process agrees.
"""

from pathlib import Path

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

if LIGHTNING:
    from lightning.fabric import Fabric
else:
    from accelkit import Fabric

STEPS = 6


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(STEPS * 2 * 8, 6, generator=generator)
    return list(DataLoader(TensorDataset(x, x @ torch.arange(6.0).unsqueeze(1)), batch_size=8))


def new_model(fabric: Fabric):
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return fabric.setup(model, optimizer)


def train(fabric: Fabric, model, optimizer, data) -> float:
    for x, y in data:
        x, y = fabric.to_device((x, y))
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
    return loss.item()


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main(fabric: Fabric, root: Path) -> None:
    fabric.seed_everything(3)
    data = batches()[fabric.global_rank::fabric.world_size]
    first, rest = data[:STEPS // 2], data[STEPS // 2:]
    model, optimizer = new_model(fabric)
    train(fabric, model, optimizer, first)
    path = root / "state.ckpt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": len(first), "note": "half way"})
    fabric.save(root / "weights-only.ckpt", {"model": model, "step": len(first)},
                filter={"model": lambda key, value: key.endswith("weight")})
    uninterrupted_loss = train(fabric, model, optimizer, rest)

    fabric.seed_everything(99)  # a different initialisation, overwritten by the load
    resumed, resumed_optimizer = new_model(fabric)
    state = {"model": resumed, "optimizer": resumed_optimizer, "step": 0}
    remainder = fabric.load(path, state)
    expect(state["step"] == len(first), f"the loaded step is {state['step']}")
    expect(remainder == {"note": "half way"}, f"load returned {remainder!r} as the remainder")
    resumed_loss = train(fabric, resumed, resumed_optimizer, rest)
    expect(torch.equal(flat(resumed), flat(model)), "the resumed run did not continue as the uninterrupted one")

    # strict loading: a key the checkpoint lacks is refused by name, unless strict=False
    try:
        fabric.load(path, {"model": resumed, "scheduler_state": {}})
    except KeyError as error:
        expect("scheduler_state" in str(error), f"the KeyError does not name the missing key: {error}")
    else:
        raise AssertionError("strict loading accepted a state key that the checkpoint lacks")
    fabric.load(path, {"model": resumed, "scheduler_state": {}}, strict=False)

    # a filtered checkpoint holds the kept keys only; loading it into a model is strict unless asked otherwise
    whole = fabric.load(root / "weights-only.ckpt")
    kept = sorted(whole["model"])
    expect(kept == ["0.weight", "2.weight"], f"the filtered checkpoint holds {kept}")
    fresh, _ = new_model(fabric)
    bias_before = fresh.module[0].bias.detach().clone()  # .module: the model as the user made it
    try:
        fabric.load(root / "weights-only.ckpt", {"model": fresh})
    except RuntimeError as error:
        expect("bias" in str(error), f"the strict load's error does not name the missing biases: {error}")
    else:
        raise AssertionError("a strict load of a filtered checkpoint accepted the missing biases")
    fabric.load(root / "weights-only.ckpt", {"model": fresh}, strict=False)
    first_layer = fresh.module[0]
    expect(torch.equal(first_layer.weight.detach().cpu(), whole["model"]["0.weight"].cpu()), "weights not loaded")
    expect(torch.equal(first_layer.bias.detach(), bias_before), "strict=False changed the biases it had no value for")

    # load_raw: a state dict saved by plain torch.save, without Fabric
    raw = root / "raw.pt"
    if fabric.global_rank == 0:
        torch.save(nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)).state_dict(), raw)
    fabric.barrier()
    fabric.load_raw(raw, fresh)
    expect(torch.equal(flat(fresh).cpu(), torch.cat([t.flatten() for t in torch.load(raw).values()])),
           "load_raw did not restore the plain state dict")

    gathered = fabric.all_gather(flat(resumed))
    if fabric.world_size > 1:
        expect(all(torch.equal(gathered[0], other) for other in gathered[1:]), "the processes' weights differ")
    report(fabric, uninterrupted_loss=uninterrupted_loss, resumed_loss=resumed_loss,
           weight_sum=flat(resumed).sum().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric, Path(args.root))
    ok("checkpoint", fabric)
