"""A stand-in for ``torchvision.datasets.MNIST`` and ``torchvision.transforms`` with the same call shape.

The seed guide's sampler program builds ``MNIST(os.getcwd(), train=True, download=True,
transform=transforms.ToTensor())``. Here there is neither torchvision nor a network, so the program imports
these two names from this file instead (its only change besides the ``lightning`` imports). The images are
256 (60 for ``train=False``) deterministic 28x28 uint8 pictures whose class is the brightest of ten horizontal
bands, so a linear model learns them in a few steps. Nothing is downloaded or written.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch


class MNIST(torch.utils.data.Dataset):
    """``(image, label)`` pairs like torchvision's MNIST: ``image`` as ``transform`` returns it, ``label`` an int."""

    def __init__(self, root: str, train: bool = True, download: bool = False,
                 transform: Callable[[Any], Any] | None = None) -> None:
        self.root, self.train, self.transform = root, train, transform
        count = 256 if train else 60
        generator = torch.Generator().manual_seed(0 if train else 1)
        self.targets = torch.randint(0, 10, (count,), generator=generator)
        images = torch.randint(0, 100, (count, 28, 28), generator=generator, dtype=torch.uint8)
        for index, label in enumerate(self.targets.tolist()):
            rows = slice(label * 2 + 4, label * 2 + 6)  # ten bands of two rows, from row 4 to row 23
            images[index, rows, :] = 255
        self.data = images

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        image = self.data[index]
        return (self.transform(image) if self.transform is not None else image), int(self.targets[index])


def _to_tensor() -> Callable[[torch.Tensor], torch.Tensor]:
    """``transforms.ToTensor()``: a ``HxW`` uint8 picture becomes a ``1xHxW`` float tensor in [0, 1]."""
    return lambda image: image.unsqueeze(0).float() / 255.0


#: the ``transforms`` namespace as the guide uses it (``transforms.ToTensor()``)
transforms = SimpleNamespace(ToTensor=_to_tensor)
