"""A small language model trained with Fabric, the kind of program Lightning's Fabric language-model examples are:
a causal transformer created under ``fabric.init_module()``, token batches from ``fabric.setup_dataloaders``,
``fabric.backward``, gradients clipped with ``fabric.clip_gradients(max_norm=...)`` (whose returned total norm is
printed), and the validation perplexity averaged over the processes with ``fabric.all_reduce``.

The text is made here (no download): token ``t+1`` is ``(3 * t + 1) mod 17`` of token ``t``, so a model that has
learned it predicts every next token. Checked: the validation perplexity falls far below the vocabulary size (17),
the parameters were created on the Fabric's device, and every process ends with the same weights.
"""

import math

import torch
from _common import LIGHTNING, expect, fabric_kwargs, ok, parse_args, report
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

if LIGHTNING:
    from lightning.fabric import Fabric
else:
    from accelkit import Fabric

VOCAB, CONTEXT, WIDTH, SEQUENCES, EPOCHS = 17, 12, 32, 128, 5


def text(count: int, seed: int) -> TensorDataset:
    starts = torch.randint(0, VOCAB, (count,), generator=torch.Generator().manual_seed(seed))
    tokens = [starts]
    for _ in range(CONTEXT):
        tokens.append((3 * tokens[-1] + 1) % VOCAB)
    sequences = torch.stack(tokens, dim=1)
    return TensorDataset(sequences[:, :-1], sequences[:, 1:])


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False)

    def forward(self, tokens):
        hidden = self.embedding(tokens) + self.position[: tokens.shape[1]]
        return self.head(self.encoder(hidden, mask=self.causal, is_causal=True))


def main(fabric: Fabric) -> None:
    fabric.seed_everything(13)
    with fabric.init_module():
        model = TinyTransformer()
    expect(model.head.weight.device == fabric.device, f"init_module made the weights on {model.head.weight.device}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer = fabric.setup(model, optimizer)
    train_loader, val_loader = fabric.setup_dataloaders(DataLoader(text(SEQUENCES, 1), batch_size=16, shuffle=True),
                                                        DataLoader(text(64, 2), batch_size=32))
    norms = []
    for _ in range(EPOCHS):
        model.train()
        for inputs, targets in train_loader:
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
            optimizer.zero_grad()
            fabric.backward(loss)
            norms.append(float(fabric.clip_gradients(model, optimizer, max_norm=1.0)))
            optimizer.step()

    model.eval()
    totals = torch.zeros(2, device=fabric.device)  # summed loss, tokens
    with torch.no_grad():
        for inputs, targets in val_loader:
            logits = model(inputs)
            totals += torch.stack([F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), reduction="sum"),
                                   torch.tensor(float(targets.numel()), device=fabric.device)])
    totals = fabric.all_reduce(totals, reduce_op="sum")
    perplexity = math.exp((totals[0] / totals[1]).item())
    expect(perplexity < 3.0, f"the validation perplexity is {perplexity}")
    expect(all(math.isfinite(n) and n >= 0 for n in norms), f"clip_gradients returned {norms[:5]}...")
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = fabric.all_gather(weights)
    if fabric.world_size > 1:
        expect(all(torch.allclose(gathered[0], other) for other in gathered[1:]), "the processes' weights differ")
    report(fabric, perplexity=perplexity, first_grad_norm=norms[0], last_grad_norm=norms[-1],
           weight_sum=weights.sum().item())


if __name__ == "__main__":
    args = parse_args(__doc__)
    fabric = Fabric(**fabric_kwargs(args))
    fabric.launch()
    main(fabric)
    ok("language_model", fabric)
