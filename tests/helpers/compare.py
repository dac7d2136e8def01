"""Comparisons of trained weights shared by the tests of several strategies."""

from __future__ import annotations

import torch


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    """Two state dicts hold the same keys and, key by key, values within ``atol`` (no relative tolerance); a
    failure names the key."""
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=0, msg=lambda m, key=key: f"{key}: {m}")
