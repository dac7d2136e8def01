"""(g) A hand-built ``DistributedSampler`` in ``train_dataloader`` (``num_replicas=trainer.world_size``,
``rank=trainer.global_rank``), as Lightning's TPU and DDP guides show.

Lightning uses such a loader as given (no second sharding) and calls ``sampler.set_epoch(epoch)`` every epoch:
each rank sees ``64 / world_size`` samples an epoch, the ranks together see all 64 once, and the shuffled order
changes from epoch to epoch. Written as a Lightning user writes it; only the imports point at accelkit.
"""

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule

SAMPLES, BATCH, EPOCHS = 64, 4, 2


class IndexedDataset(Dataset):
    """Returns each sample's index with it, so the loop's view of the data can be counted."""

    def __init__(self, n: int):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 5, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return index, self.x[index], self.y[index]


class ShardedModel(LightningModule):
    def __init__(self, root: str):
        super().__init__()
        self.layer = nn.Linear(5, 1)
        self.root = root

    def train_dataloader(self):
        sampler = DistributedSampler(IndexedDataset(SAMPLES), num_replicas=self.trainer.world_size,
                                     rank=self.trainer.global_rank, shuffle=True, seed=17)
        self.sampler = sampler
        return DataLoader(sampler.dataset, batch_size=BATCH, sampler=sampler)

    def on_train_epoch_start(self):
        append(self.root, "epochs", self.global_rank,
               {"epoch": self.current_epoch, "sampler_epoch": self.sampler.epoch})

    def training_step(self, batch, batch_idx):
        index, x, y = batch
        append(self.root, "indices", self.global_rank, {"epoch": self.current_epoch, "index": index.tolist()})
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    args = parse_args(__doc__)
    L.seed_everything(1)
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, enable_checkpointing=False,
                        **trainer_kwargs(args))
    trainer.fit(ShardedModel(args.root))

    world = args.devices
    seen, epochs = read(args.root, "indices"), read(args.root, "epochs")
    expect(sorted(seen) == list(range(world)), f"training ran on ranks {sorted(seen)}")
    for rank in range(world):
        expect([e["sampler_epoch"] for e in epochs[rank]] == list(range(EPOCHS)),
               f"rank {rank}: sampler.set_epoch not called each epoch: {epochs[rank]}")
    orders = {}
    for epoch in range(EPOCHS):
        shards = [[i for b in seen[rank] if b["epoch"] == epoch for i in b["index"]] for rank in range(world)]
        for rank, shard in enumerate(shards):
            expect(len(shard) == SAMPLES // world,
                   f"epoch {epoch}: rank {rank} saw {len(shard)} samples, expected {SAMPLES // world} "
                   f"(a hand-built DistributedSampler must not be sharded again)")
        expect(sorted(i for shard in shards for i in shard) == list(range(SAMPLES)),
               f"epoch {epoch}: the ranks together did not see every sample once")
        orders[epoch] = shards[0]
    expect(orders[0] != orders[1], "the shuffled order did not change between epochs (set_epoch)")
    ok("sampler")


if __name__ == "__main__":
    main()
