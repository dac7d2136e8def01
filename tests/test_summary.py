"""ModelSummary counts parameters of real modules: shared ones once, lazy ones as unknown, by depth."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accelkit.module.summary import ModelSummary, summarize


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))  # 40 + 0 + 72
        self.norm = nn.BatchNorm1d(8).eval()  # 16 parameters (buffers are not parameters)
        self.head = nn.Linear(8, 2)  # 18

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.encoder(x)))


def table_rows(summary: ModelSummary) -> list[list[str]]:
    """The layer rows of the table, cells stripped (header left out)."""
    rows = [line.split("|") for line in str(summary).splitlines() if line.count("|") == 4][1:]
    return [[cell.strip() for cell in row] for row in rows]


def totals(summary: ModelSummary) -> dict[str, str]:
    lines = str(summary).splitlines()
    return {line.split("  ", 1)[1].strip(): line.split("  ", 1)[0].strip() for line in lines
            if line.endswith(("params", "(MB)", "mode"))}


def test_depth_one_lists_children_with_counts_and_modes():
    summary = ModelSummary(Net())
    assert summary.layer_names == ["encoder", "norm", "head"]
    assert summary.layer_types == ["Sequential", "BatchNorm1d", "Linear"]
    assert summary.param_nums == [112, 16, 18]
    assert summary.training_modes == [True, False, True]
    assert summary.total_parameters == summary.trainable_parameters == 146
    assert summary.model_size == 146 * 4 / 1e6
    assert table_rows(summary) == [
        ["0", "encoder", "Sequential", "112", "train"], ["1", "norm", "BatchNorm1d", "16", "eval"],
        ["2", "head", "Linear", "18", "train"]]
    assert totals(summary) == {"Trainable params": "146", "Non-trainable params": "0", "Total params": "146",
                               "Total estimated model params size (MB)": "0.001", "Modules in train mode": "5",
                               "Modules in eval mode": "1"}


def test_all_depths_and_totals_only():
    every = ModelSummary(Net(), max_depth=-1)
    assert every.layer_names == ["encoder", "encoder.0", "encoder.1", "encoder.2", "norm", "head"]
    assert every.param_nums == [112, 40, 0, 72, 16, 18]
    only_totals = ModelSummary(Net(), max_depth=0)
    assert only_totals.layer_names == [] and "|" not in str(only_totals)
    assert totals(only_totals)["Total params"] == "146"


def test_frozen_parameters_are_non_trainable():
    net = Net()
    net.encoder.requires_grad_(False)
    summary = ModelSummary(net)
    assert (summary.trainable_parameters, summary.total_parameters) == (34, 146)
    assert totals(summary)["Non-trainable params"] == "112"


def test_shared_parameters_are_counted_once():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 10)  # 1,000
            self.decode = nn.Linear(10, 100, bias=False)
            self.decode.weight = self.embed.weight  # tied: the same 1,000
            self.alias = self.embed  # the same module registered twice

    summary = ModelSummary(Tied())
    assert summary.total_parameters == 1000
    assert summary.layer_names == ["embed", "decode"] and summary.param_nums == [1000, 1000]
    assert totals(summary)["Total params"] == "1.0 K"


def test_lazy_parameters_are_unknown_until_the_first_forward():
    net = nn.Sequential(nn.Linear(3, 4), nn.LazyLinear(5))
    summary = ModelSummary(net)
    assert summary.has_uninitialized and summary.total_parameters == 16
    assert table_rows(summary) == [["0", "0", "Linear", "16", "train"], ["1", "1", "LazyLinear", "?", "train"]]
    assert totals(summary)["Total params"] == "16 + ?"
    net(torch.zeros(2, 3))
    after = ModelSummary(net)
    assert not after.has_uninitialized and after.total_parameters == 16 + 25
    assert "?" not in str(after)


def test_size_follows_the_dtype():
    assert ModelSummary(nn.Linear(10, 10).to(torch.float64)).model_size == 110 * 8 / 1e6
    assert ModelSummary(nn.Linear(10, 10).to(torch.bfloat16)).model_size == 110 * 2 / 1e6


def test_summarize_prints_and_returns(capsys):
    summary = summarize(Net(), max_depth=1)
    assert capsys.readouterr().out.strip() == str(summary)
    assert summarize(Net(), print_fn=None).total_parameters == 146 and capsys.readouterr().out == ""


def test_bad_depth_is_an_error():
    with pytest.raises(ValueError, match="max_depth.*-2"):
        ModelSummary(Net(), max_depth=-2)
