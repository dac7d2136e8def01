"""The sampler program of the TPU guide our users come from (Lightning's "TPU support" page, the section "If for
some reason you still need to, this is how to construct the sampler for TPU use"), run as a user copies it.

Changed from the guide: only the imports. ``pytorch_lightning`` is ``accelkit``; torchvision's ``MNIST`` and
``transforms`` come from ``mnist_standin`` (no torchvision, no download here). The guide's ``train_dataloader``
is kept word for word, including its torch_xla 1.x calls ``xm.xrt_world_size()`` and ``xm.get_ordinal()``,
which torch_xla 2.x removed. (The guide's page lost the class name in ``sampler = ...(dataset, ...)`` when it was
extracted; the original reads ``torch.utils.data.distributed.DistributedSampler``.) ``use_tpu`` is the guide's
own flag, left undefined there: this program trains on TPU cores, so it is ``True``.

The program trains twice in one process, with the guide's two ways of asking for one core: ``devices=1``
(``accelerator="tpu"``) and ``tpu_cores=[1]``. Run it with ``PJRT_DEVICE=CPU`` to use XLA on the host. The
test scaffolding (the ``Seen`` callback and the checks after ``fit``) is not part of the guide; the last line
printed is ``SEED RESULT <json>``.
"""

import json
import os

import torch
import torch_xla.core.xla_model as xm
from mnist_standin import MNIST, transforms  # was: from torchvision.datasets import MNIST; from torchvision ...
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

import accelkit as pl  # was: import pytorch_lightning as pl
from accelkit import Callback  # was: from pytorch_lightning import Callback
from accelkit import Module as LightningModule  # was: from pytorch_lightning import LightningModule

use_tpu = True


class MyLightningModule(LightningModule):
    """"Then set up your LightningModule as normal": a linear classifier of the 28x28 digits."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(28 * 28, 10)

    def forward(self, x):
        return self.layer(x.view(x.size(0), -1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)

    # ---------------------------------------------------------------- the guide's code, unchanged
    def train_dataloader(self):
        dataset = MNIST(os.getcwd(), train=True, download=True, transform=transforms.ToTensor())

        # required for TPU support
        sampler = None
        if use_tpu:
            sampler = torch.utils.data.distributed.DistributedSampler(
                dataset, num_replicas=xm.xrt_world_size(), rank=xm.get_ordinal(), shuffle=True
            )

        loader = DataLoader(dataset, sampler=sampler, batch_size=32)

        return loader


class Seen(Callback):
    """Test scaffolding: what the run used, per epoch (the sampler and its epoch) and per step (the loss)."""

    def __init__(self):
        self.samplers, self.losses, self.devices = [], [], set()

    def on_train_epoch_start(self, trainer, pl_module):
        sampler = trainer.train_dataloader.sampler
        self.samplers.append({"type": type(sampler).__name__, "num_replicas": getattr(sampler, "num_replicas", None),
                              "rank": getattr(sampler, "rank", None), "shuffle": getattr(sampler, "shuffle", None),
                              "epoch": getattr(sampler, "epoch", None)})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.devices.add(batch[0].device.type)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss.detach()))


def train(**trainer_args):
    seen = Seen()
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[seen], **trainer_args)
    model = MyLightningModule()
    trainer.fit(model)
    return {"strategy": type(trainer.strategy).__name__, "devices": sorted(seen.devices),
            "samplers": seen.samplers, "steps": trainer.global_step,
            "first_loss": seen.losses[0], "last_loss": seen.losses[-1]}


if __name__ == "__main__":
    runs = {"devices=1": train(accelerator="tpu", devices=1), "tpu_cores=[1]": train(tpu_cores=[1])}
    # after fit the torch_xla 1.x stand-ins are gone again: they exist only while an XLA strategy runs
    left = [name for name in ("xrt_world_size", "get_ordinal") if hasattr(xm, name)]
    for name, run in runs.items():
        assert run["strategy"] == "XLASingleStrategy" and run["devices"] == ["xla"], (name, run)
        assert run["steps"] == 16, (name, run)  # 256 samples / 32 per batch, 2 epochs: the sampler kept them all
        for epoch, sampler in enumerate(run["samplers"]):
            assert sampler == {"type": "DistributedSampler", "num_replicas": 1, "rank": 0, "shuffle": True,
                               "epoch": epoch}, (name, sampler)
        assert run["last_loss"] < run["first_loss"], (name, run)
    assert not left, f"still on torch_xla after fit: {left}"
    print("SEED RESULT " + json.dumps({"runs": runs, "left_after_fit": left}), flush=True)
