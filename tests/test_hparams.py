"""Hyper-parameters: capture by ``save_hyperparameters``, ``hparams`` access, plain data in checkpoints
(``weights_only=True``), and ``load_from_checkpoint`` rebuilding the object."""

from __future__ import annotations

import copy
import dataclasses
import enum
import io
import pickle
import re
import sys
import warnings
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import accelkit
from accelkit.module.datamodule import DataModule
from accelkit.module.hparams import (
    AttributeDict,
    HyperparametersMixin,
    checkpoint_entries,
    hparams_to_log,
    load_from_checkpoint,
    load_hparams_file,
    plain_hparams,
)


class Net(HyperparametersMixin, nn.Module):
    """A LightningModule-like model: every ``__init__`` argument is a hyper-parameter."""

    def __init__(self, hidden: int = 4, lr: float = 0.1, *extra: Any, activation: str = "relu",
                 **kwargs: Any) -> None:
        super().__init__()
        self.layer = nn.Linear(3, hidden)
        self.save_hyperparameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class WithBackbone(HyperparametersMixin, nn.Module):
    def __init__(self, backbone: nn.Module, lr: float = 0.1, note: str = "x") -> None:
        super().__init__()
        self.backbone = backbone
        self.save_hyperparameters(ignore=["backbone"])


class Base(HyperparametersMixin, nn.Module):
    def __init__(self, width: int = 2, depth: int = 1) -> None:
        super().__init__()
        self.layer = nn.Linear(width, width)
        self.save_hyperparameters()


class Child(Base):
    def __init__(self, dropout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)


def save(obj: Any, path: Path) -> Path:
    torch.save(obj, path)
    return path


def write_checkpoint(model: Any, path: Path) -> Path:
    return save({"state_dict": model.state_dict(), **checkpoint_entries(model)}, path)


# ------------------------------------------------------------------------------------------------ capture
def test_no_argument_captures_every_init_argument_and_kwargs():
    net = Net(8, 0.5, "ignored positional", activation="gelu", dropout=0.2, scale=3)
    assert dict(net.hparams) == {"hidden": 8, "lr": 0.5, "activation": "gelu", "dropout": 0.2, "scale": 3}
    assert "self" not in net.hparams and "__class__" not in net.hparams and "extra" not in net.hparams
    assert net.hparams.lr == 0.5 and net.hparams["hidden"] == 8
    assert net._log_hyperparams is True


def test_arguments_of_every_class_in_the_hierarchy_are_captured():
    child = Child(0.3, width=5)
    assert dict(child.hparams) == {"width": 5, "depth": 1, "dropout": 0.3}


def test_capture_from_a_helper_called_by_init():
    class Helper(HyperparametersMixin):
        def __init__(self, a: int, b: int = 2) -> None:
            self._record()

        def _record(self) -> None:
            self.save_hyperparameters()

    assert dict(Helper(1).hparams) == {"a": 1, "b": 2}


def test_ignore_as_a_string_or_a_list():
    class Two(HyperparametersMixin):
        def __init__(self, a: int = 1, b: int = 2, c: int = 3) -> None:
            self.save_hyperparameters(ignore="a")

    class Three(HyperparametersMixin):
        def __init__(self, a: int = 1, b: int = 2, c: int = 3) -> None:
            self.save_hyperparameters(ignore=["a", "c"])

    assert dict(Two().hparams) == {"b": 2, "c": 3}
    assert dict(Three().hparams) == {"b": 2}
    assert "ignore" not in Three().hparams


def test_a_misspelt_ignore_name_is_named_in_a_warning():
    class Typo(HyperparametersMixin):
        def __init__(self, backbone: int = 1) -> None:
            self.save_hyperparameters(ignore=["backbon"])

    with pytest.warns(UserWarning, match="backbon"):
        typo = Typo()
    assert dict(typo.hparams) == {"backbone": 1}


def test_explicit_names_keep_only_those():
    class Some(HyperparametersMixin):
        def __init__(self, a: int = 1, b: int = 2, c: int = 3) -> None:
            self.save_hyperparameters("a", "c")

    assert dict(Some().hparams) == {"a": 1, "c": 3}


def test_an_unknown_name_is_an_error_listing_the_arguments():
    class Wrong(HyperparametersMixin):
        def __init__(self, a: int = 1) -> None:
            self.save_hyperparameters("b")

    with pytest.raises(ValueError, match=r"\['b'\].*\['a'\]"):
        Wrong()


@pytest.mark.parametrize("given", [{"lr": 0.1, "layers": 2}, Namespace(lr=0.1, layers=2),
                                   SimpleNamespace(lr=0.1, layers=2), AttributeDict(lr=0.1, layers=2)])
def test_a_dict_namespace_or_attributedict(given):
    class Conf(HyperparametersMixin):
        def __init__(self, config: Any) -> None:
            self.save_hyperparameters(config)

    conf = Conf(given)
    assert dict(conf.hparams) == {"lr": 0.1, "layers": 2}
    assert type(conf.hparams) is AttributeDict
    assert conf.__dict__["_hparams_name"] == "config"


def test_an_object_of_another_kind_is_refused_naming_its_type_and_what_works():
    class Conf(HyperparametersMixin):
        def __init__(self, config: Any) -> None:
            self.save_hyperparameters(config)

    class Settings:
        lr = 0.1

    with pytest.raises(ValueError, match=r"not Settings; pass vars\(obj\)"):
        Conf(Settings())


def test_keyword_values_are_an_accelkit_extension_that_accumulates():
    class Kw(HyperparametersMixin):
        def __init__(self) -> None:
            self.save_hyperparameters(lr=0.05, momentum=0.9)

    kw = Kw()
    kw.save_hyperparameters(batch_size=32, logger=False)
    assert dict(kw.hparams) == {"lr": 0.05, "momentum": 0.9, "batch_size": 32}
    assert kw._log_hyperparams is False


def test_a_single_plain_value_or_mixed_arguments_are_errors():
    class One(HyperparametersMixin):
        def __init__(self, lr: float = 0.1, mode: str = "a") -> None:
            self.save_hyperparameters(lr)

    class Mixed(HyperparametersMixin):
        def __init__(self, lr: float = 0.1) -> None:
            self.save_hyperparameters("lr", {"x": 1})

    with pytest.raises(ValueError, match="keywords"):
        One()
    with pytest.raises(TypeError, match="either names"):
        Mixed()


def test_outside_init_there_is_nothing_to_capture_and_it_says_so():
    later = Net()
    with pytest.warns(UserWarning, match="outside its __init__"):
        later.save_hyperparameters()
    assert dict(later.hparams) == {}


def test_a_dataclass_module_captures_its_fields():
    @dataclasses.dataclass(eq=False)
    class Config(HyperparametersMixin):
        lr: float = 0.1
        steps: int = 5

        def __post_init__(self) -> None:
            self.save_hyperparameters()

    assert dict(Config(steps=7).hparams) == {"lr": 0.1, "steps": 7}


def test_a_module_argument_is_kept_but_warned_about_once_with_lightnings_advice():
    """Lightning's warning, once: at ``save_hyperparameters``, not again when a checkpoint leaves the module out
    (accelkit warned a second time there); a module added to ``hparams`` later is still named at checkpoint time."""
    class Holds(HyperparametersMixin, nn.Module):
        def __init__(self, encoder: nn.Module) -> None:
            super().__init__()
            self.save_hyperparameters()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        holds = Holds(nn.Linear(1, 1))
        entries = checkpoint_entries(holds)
        entries = checkpoint_entries(holds)
    assert [str(w.message) for w in caught] == [
        "Attribute 'encoder' is an instance of `nn.Module` and is already saved during checkpointing. It is "
        "recommended to ignore them using `self.save_hyperparameters(ignore=['encoder'])`. (accelkit leaves it out "
        "of the checkpoint's hyper-parameters: pass it to load_from_checkpoint(..., encoder=...).)"]
    assert isinstance(holds.hparams.encoder, nn.Linear) and "encoder" not in entries["hyper_parameters"]
    holds.hparams["head"] = nn.Linear(1, 1)
    with pytest.warns(UserWarning, match="hyper-parameter 'head' \\(Linear\\) is not plain data"):
        checkpoint_entries(holds)


# ------------------------------------------------------------------------------------------------ hparams
def test_hparams_are_mutable_and_hparams_initial_is_not():
    net = Net(hidden=4, lr=0.1)
    net.hparams.lr = 0.01
    net.hparams["new"] = True
    assert net.hparams.lr == 0.01 and net.hparams.new is True
    assert dict(net.hparams_initial) == {"hidden": 4, "lr": 0.1, "activation": "relu"}
    net.hparams_initial["lr"] = 5  # a copy: the saved initial values do not change
    assert net.hparams_initial.lr == 0.1


def test_hparams_cannot_be_assigned():
    with pytest.raises(AttributeError, match="save_hyperparameters"):
        Net().hparams = {"lr": 1}


def test_an_object_that_never_saved_has_empty_hparams():
    class Bare(HyperparametersMixin):
        pass

    assert Bare().hparams == {} and Bare().hparams_initial == {} and Bare()._log_hyperparams is False


def test_attributedict_access_repr_copy_and_pickle():
    hp = AttributeDict(lr=0.1, nested=AttributeDict(depth=2))
    assert hp.lr == 0.1 and hp.nested.depth == 2
    hp.momentum = 0.9
    assert hp["momentum"] == 0.9
    del hp.momentum
    assert "momentum" not in hp
    with pytest.raises(AttributeError, match=r"'missing'.*'lr'"):
        hp.missing
    assert repr(hp).splitlines()[:3] == ["AttributeDict(", "    'lr':     0.1", "    'nested': AttributeDict("]
    assert repr(AttributeDict()) == "AttributeDict()"
    assert type(hp.copy()) is AttributeDict and type(copy.deepcopy(hp)) is AttributeDict
    restored = pickle.loads(pickle.dumps(hp))
    assert restored == hp and restored.nested.depth == 2 and type(restored) is AttributeDict


def test_a_module_with_hparams_pickles():
    net = Net(hidden=6, lr=0.3)
    clone = pickle.loads(pickle.dumps(net))
    assert clone.hparams == net.hparams and clone.hparams_initial == net.hparams_initial


def test_a_module_with_hparams_can_be_scripted():
    scripted = torch.jit.script(Net(hidden=2))
    assert scripted(torch.ones(1, 3)).shape == (1, 2)


# ------------------------------------------------------------------------------------------------ plain data
class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Optim:
    name: str
    betas: tuple[float, float]


def test_plain_hparams_convert_to_what_weights_only_loading_reads(tmp_path):
    hparams = {
        "data_dir": Path("/data/set"),
        "seed": np.int64(3),
        "scale": np.float32(0.5),
        "mean": np.array([[1.0, 2.0]]),
        "args": Namespace(lr=0.1, dirs=[Path("a")]),
        "nested": AttributeDict(inner=AttributeDict(k=np.bool_(True))),
        "shape": (2, 3),
        "colour": Colour.RED,
        "optim": Optim("adam", (0.9, 0.99)),
        "weights": torch.ones(2),
        "dtype": torch.float16,
        "plain": ["a", 1, None, 2.5],
    }
    plain = plain_hparams(hparams)
    assert plain["data_dir"] == "/data/set" and type(plain["seed"]) is int and type(plain["scale"]) is float
    assert plain["mean"] == [[1.0, 2.0]]
    assert plain["args"] == {"lr": 0.1, "dirs": ["a"]} and type(plain["args"]) is dict
    assert plain["nested"] == {"inner": {"k": True}} and type(plain["nested"]) is dict
    assert plain["shape"] == (2, 3) and plain["colour"] == "red"
    assert plain["optim"] == {"name": "adam", "betas": (0.9, 0.99)}
    loaded = torch.load(save({"hyper_parameters": plain}, tmp_path / "h.pt"), weights_only=True)["hyper_parameters"]
    assert loaded.keys() == hparams.keys()
    assert loaded["shape"] == (2, 3) and type(loaded["shape"]) is tuple and loaded["dtype"] is torch.float16
    assert torch.equal(loaded["weights"], torch.ones(2))
    assert {k: v for k, v in loaded.items() if k != "weights"} == {k: v for k, v in plain.items() if k != "weights"}
    assert isinstance(hparams["data_dir"], Path)  # the original is not changed


def test_values_that_are_not_data_are_dropped_with_a_warning_naming_the_key(tmp_path):
    hparams = {"lr": 0.1, "encoder": nn.Linear(1, 1), "loss_cls": nn.MSELoss, "fn": lambda x: x,
               "deep": {"ok": 1, "obj": object()}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = plain_hparams(hparams)
    # a class its module holds is kept by reference (see the section on classes and functions below)
    assert plain == {"lr": 0.1, "loss_cls": {"__reference__": "torch.nn.modules.loss:MSELoss"}, "deep": {"ok": 1}}
    messages = "\n".join(str(w.message) for w in caught)
    for key in ("'encoder'", "'fn'", "'deep.obj'"):
        assert key in messages
    assert "'loss_cls'" not in messages
    assert "not stored in checkpoints" in messages and "load_from_checkpoint(path, encoder=...)" in messages
    assert "'fn' (function) cannot be stored by reference ('test_values_that_are_not_data_are_dropped_with_a_" \
           "warning_naming_the_key.<locals>.<lambda>' is defined inside a function" in messages
    torch.load(save(plain, tmp_path / "p.pt"), weights_only=True)


# ------------------------------------------------------------------------------------------------ load
def test_load_from_checkpoint_rebuilds_an_equal_model(tmp_path):
    net = Net(hidden=5, lr=0.2, activation="tanh", dropout=0.1)
    path = write_checkpoint(net, tmp_path / "net.ckpt")
    loaded = Net.load_from_checkpoint(path)
    assert type(loaded) is Net and loaded is not net
    assert dict(loaded.hparams) == dict(net.hparams)
    for key, value in net.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    assert loaded.training  # as Lightning: the caller chooses eval()


def test_overrides_replace_saved_values(tmp_path):
    path = write_checkpoint(Net(hidden=5, lr=0.2), tmp_path / "net.ckpt")
    loaded = Net.load_from_checkpoint(path, lr=0.9, extra_key="new")
    assert loaded.hparams.lr == 0.9 and loaded.hparams.hidden == 5 and loaded.hparams.extra_key == "new"


def test_the_function_form_and_an_open_file(tmp_path):
    net = Net(hidden=3)
    buffer = io.BytesIO()
    torch.save({"state_dict": net.state_dict(), **checkpoint_entries(net)}, buffer)
    buffer.seek(0)
    loaded = load_from_checkpoint(Net, buffer)
    assert torch.equal(loaded.layer.weight, net.layer.weight)


def test_strict_loading(tmp_path):
    net = Net(hidden=4)
    state = {**net.state_dict(), "stray.weight": torch.zeros(1)}
    path = save({"state_dict": state, **checkpoint_entries(net)}, tmp_path / "stray.ckpt")
    with pytest.raises(RuntimeError, match="stray.weight"):
        Net.load_from_checkpoint(path)
    with pytest.warns(UserWarning, match="stray.weight"):
        loaded = Net.load_from_checkpoint(path, strict=False)
    assert torch.equal(loaded.layer.weight, net.layer.weight)


def test_a_module_that_declares_strict_loading_false(tmp_path):
    class Loose(Net):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.strict_loading = False

    class LooseByDefault(Net):
        strict_loading = False

    path = save({"state_dict": {}, "hyper_parameters": {"hidden": 2}}, tmp_path / "empty.ckpt")
    for cls in (Loose, LooseByDefault):
        with pytest.warns(UserWarning, match="layer.weight"):
            cls.load_from_checkpoint(path)
    with pytest.raises(ValueError, match="strict_loading"):
        Loose.load_from_checkpoint(path, strict=True)
    with pytest.raises(RuntimeError, match="layer.weight"):
        LooseByDefault.load_from_checkpoint(path, strict=True)  # a class default is no declaration


def test_a_required_argument_not_in_the_checkpoint_is_named(tmp_path):
    model = WithBackbone(nn.Linear(2, 2), lr=0.3)
    path = write_checkpoint(model, tmp_path / "bb.ckpt")
    with pytest.raises(TypeError, match=r"\['backbone'\].*load_from_checkpoint\(path, backbone=\.\.\.\)"):
        WithBackbone.load_from_checkpoint(path)
    loaded = WithBackbone.load_from_checkpoint(path, backbone=nn.Linear(2, 2))
    assert loaded.hparams.lr == 0.3 and torch.equal(loaded.backbone.weight, model.backbone.weight)


def test_saved_values_the_init_does_not_take_are_not_passed(tmp_path):
    class Fixed(HyperparametersMixin, nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(1, 1)
            self.save_hyperparameters(lr=0.05)

    path = write_checkpoint(Fixed(), tmp_path / "fixed.ckpt")
    assert torch.load(path, weights_only=True)["hyper_parameters"] == {"lr": 0.05}
    assert Fixed.load_from_checkpoint(path).hparams.lr == 0.05
    with pytest.warns(UserWarning, match=r"\['typo'\] are not arguments"):
        Fixed.load_from_checkpoint(path, typo=1)


def test_a_namespace_argument_comes_back_with_attribute_access(tmp_path):
    class FromArgs(HyperparametersMixin, nn.Module):
        def __init__(self, args: Namespace) -> None:
            super().__init__()
            self.layer = nn.Linear(1, args.width)
            self.save_hyperparameters(args)

    model = FromArgs(Namespace(width=3, data_dir=Path("/d")))
    path = write_checkpoint(model, tmp_path / "ns.ckpt")
    raw = torch.load(path, weights_only=True)
    assert raw["hyper_parameters"] == {"width": 3, "data_dir": "/d"} and raw["hparams_name"] == "args"
    loaded = FromArgs.load_from_checkpoint(path)
    assert loaded.layer.out_features == 3 and loaded.hparams.data_dir == "/d"
    assert FromArgs.load_from_checkpoint(path, data_dir="/e").hparams.data_dir == "/e"  # an override goes into args


def test_hooks_run_before_the_weights_are_loaded(tmp_path):
    calls: list[str] = []

    class Hooked(Net):
        def configure_model(self) -> None:
            calls.append("configure_model")

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            calls.append(f"on_load_checkpoint:{checkpoint['hyper_parameters']['lr']}")

        def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("load_state_dict")
            return super().load_state_dict(*args, **kwargs)

    path = write_checkpoint(Hooked(lr=0.4), tmp_path / "hooked.ckpt")
    Hooked.load_from_checkpoint(path, lr=0.7)
    assert calls == ["configure_model", "on_load_checkpoint:0.7", "load_state_dict"]


def test_pickled_objects_are_refused_unless_weights_only_is_false(tmp_path):
    net = Net()
    path = save({"state_dict": net.state_dict(), "hyper_parameters": {"hidden": 4, "odd": Colour.RED}},
                tmp_path / "pickled.ckpt")
    # the one checkpoint reader's error (the same as for ckpt_path=): names the refusal, does not advise unsafe loading
    with pytest.raises(pickle.UnpicklingError, match="holds Python objects that safe loading refuses"):
        Net.load_from_checkpoint(path)
    assert Net.load_from_checkpoint(path, weights_only=False).hparams.odd is Colour.RED


def test_map_location_and_a_missing_file(tmp_path):
    path = write_checkpoint(Net(), tmp_path / "net.ckpt")
    loaded = Net.load_from_checkpoint(path, map_location={"cpu": "cpu"})
    assert loaded.layer.weight.device.type == "cpu"
    with pytest.raises(FileNotFoundError, match="nowhere.ckpt"):
        Net.load_from_checkpoint(tmp_path / "nowhere.ckpt")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_map_location_moves_the_module_to_the_device(tmp_path):
    net = Net()
    path = write_checkpoint(net, tmp_path / "net.ckpt")
    loaded = Net.load_from_checkpoint(path, map_location="cuda")
    assert loaded.layer.weight.device.type == "cuda"
    assert torch.equal(loaded.layer.weight.cpu(), net.layer.weight)


def test_calling_it_on_an_instance_is_an_error(tmp_path):
    net = Net()
    with pytest.raises(TypeError, match=r"call it on the class.*Net.load_from_checkpoint\(path\)"):
        net.load_from_checkpoint(write_checkpoint(net, tmp_path / "n.ckpt"))


def test_hparams_file_replaces_the_checkpoint_hparams(tmp_path):
    pytest.importorskip("yaml")
    path = write_checkpoint(Net(hidden=4, lr=0.1), tmp_path / "net.ckpt")
    (tmp_path / "hparams.yaml").write_text("hidden: 4\nlr: 0.25\n")
    assert Net.load_from_checkpoint(path, hparams_file=tmp_path / "hparams.yaml").hparams.lr == 0.25
    (tmp_path / "hparams.txt").write_text("lr: 1")
    with pytest.raises(ValueError, match="YAML"):
        load_hparams_file(tmp_path / "hparams.txt")


# ------------------------------------------------------------------------------------------------ trainer helpers
def test_checkpoint_entries_and_what_the_loggers_get():
    class Data(HyperparametersMixin):
        CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
        CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"

        def __init__(self, batch_size: int = 8, lr: float = 0.1) -> None:
            self.save_hyperparameters()

        def state_dict(self) -> dict[str, Any]:
            return {"cursor": 3}

    net, data = Net(lr=0.1), Data()
    entries = checkpoint_entries(net, data)
    assert entries["hyper_parameters"]["lr"] == 0.1 and entries["hparams_name"] == "kwargs"
    assert entries["datamodule_hyper_parameters"] == {"batch_size": 8, "lr": 0.1}
    assert entries[Data.__qualname__] == {"cursor": 3}
    assert hparams_to_log(net, data) == {"hidden": 4, "lr": 0.1, "activation": "relu", "batch_size": 8}
    assert hparams_to_log(Net(), None)["hidden"] == 4
    class Quiet(HyperparametersMixin):
        def __init__(self, lr: float = 0.1) -> None:
            self.save_hyperparameters(logger=False)

    assert hparams_to_log(Quiet()) is None and checkpoint_entries(Quiet())["hyper_parameters"] == {"lr": 0.1}
    with pytest.raises(RuntimeError, match="'lr'"):
        hparams_to_log(Net(lr=0.5), data)


# ------------------------------------------------------------------------------------------------ end to end
class Regressor(accelkit.Module):
    """Lightning-style: every __init__ argument saved, the backbone left out, read back through self.hparams."""

    def __init__(self, backbone: nn.Module, lr: float = 0.05, data_dir: Path = Path("/data"),
                 scale: Any = np.float32(1.0),  # noqa: B008 - call defaults, as Lightning users write them
                 args: Namespace = Namespace(momentum=0.0)) -> None:  # noqa: B008
        super().__init__()
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = backbone
        self.head = nn.Linear(2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x)) * self.hparams.scale

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.args.momentum)


class Pairs(DataModule):
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(16, 3, generator=generator)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                           batch_size=self.hparams.batch_size)


def test_fit_save_checkpoint_and_load_from_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = Regressor(nn.Linear(3, 2), lr=0.1, data_dir=tmp_path, scale=np.float32(2.0),
                      args=Namespace(momentum=0.5))
    before = {key: value.clone() for key, value in model.state_dict().items()}
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path)
    trainer.fit(model, datamodule=Pairs(batch_size=8))
    trainer.save_checkpoint(tmp_path / "model.ckpt")

    raw = torch.load(tmp_path / "model.ckpt", weights_only=True)  # plain data only
    assert raw["hyper_parameters"] == {"lr": 0.1, "data_dir": str(tmp_path), "scale": 2.0,
                                       "args": {"momentum": 0.5}}
    assert raw["datamodule_hyper_parameters"] == {"batch_size": 8}

    with pytest.raises(TypeError, match="backbone=..."):
        Regressor.load_from_checkpoint(tmp_path / "model.ckpt")
    loaded = Regressor.load_from_checkpoint(tmp_path / "model.ckpt", backbone=nn.Linear(3, 2))
    assert not all(torch.equal(before[key], value) for key, value in model.state_dict().items())  # it trained
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    assert loaded.hparams.args.momentum == 0.5 and loaded.hparams.scale == 2.0
    x = torch.randn(5, 3)
    torch.testing.assert_close(loaded(x), model(x))
    assert Pairs.load_from_checkpoint(tmp_path / "model.ckpt").hparams.batch_size == 8


# ------------------------------------------------------------------------------------ bounded hyper-parameters
def alias_bomb_yaml(levels: int = 9, width: int = 10) -> str:
    """A YAML text of about 1 KB whose ``h`` stands for ``width ** (levels + 1)`` values (nine levels: ten billion)."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(lines + [f"h: *a{levels}"]) + "\n"


BOMBS = """
    import json, sys
    sys.path.insert(0, {core!r})
    import torch
    from accelkit.module.hparams import HyperparametersMixin

    class Net(HyperparametersMixin, torch.nn.Module):
        def __init__(self, h=None):
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(1, 1)

    shared = [1]
    for _ in range(60):  # 2 ** 60 values in a file of 2 KB: one list per level, named twice by the next
        shared = [shared, shared]
    torch.save({{"state_dict": Net().state_dict(), "hyper_parameters": {{"h": shared}}}}, "shared.ckpt")
    torch.save({{"state_dict": Net().state_dict(), "hyper_parameters": {{"h": 1}}}}, "plain.ckpt")
    errors = []
    for path, hparams_file in (("plain.ckpt", "bomb.yaml"), ("shared.ckpt", None), ("plain.ckpt", "cycle.yaml")):
        try:
            Net.load_from_checkpoint(path, hparams_file=hparams_file)
            errors.append(None)
        except Exception as error:
            errors.append([type(error).__name__, str(error)])
    small = Net.load_from_checkpoint("plain.ckpt", hparams_file="aliases.yaml").hparams.h
    print(json.dumps({{"errors": errors, "small": small}}))
"""


def test_an_alias_bomb_or_shared_lists_are_refused_before_they_are_expanded(tmp_path, monkeypatch, forked_python):
    """A 1 KB YAML of nine levels of aliases hung load_from_checkpoint(hparams_file=...), and a 2 KB checkpoint whose
    hyper-parameters share one list per level exhausted memory (each use was copied): both are refused with an error
    naming the source. In a subprocess, bounded by its timeout, so that a regression fails instead of hanging."""
    (tmp_path / "bomb.yaml").write_text(alias_bomb_yaml())
    (tmp_path / "cycle.yaml").write_text("h: &h [1, *h]\n")
    (tmp_path / "aliases.yaml").write_text("base: &b [1, 2]\nh: [*b, *b]\n")  # a few aliases: fine
    monkeypatch.chdir(tmp_path)
    assert len(alias_bomb_yaml()) < 1024
    out = forked_python(BOMBS.format(core=str(Path(accelkit.__file__).resolve().parents[1])))
    bomb, shared, cycle = out["errors"]
    assert bomb[0] == shared[0] == cycle[0] == "DataBombError"
    assert bomb[1].startswith("hparams_file 'bomb.yaml' stands for more than 1,000,000 values once its aliases")
    assert shared[1].startswith("checkpoint 'shared.ckpt' hyper_parameters stands for more than 1,000,000 values")
    assert "contains itself" in cycle[1] and "cycle.yaml" in cycle[1]
    assert out["small"] == [[1, 2], [1, 2]]


def test_too_deep_or_too_long_yaml_is_refused_naming_the_bound(tmp_path):
    from accelkit.utilities.bounded import MAX_DEPTH, DataBombError, check_expanded_size, load_yaml

    with pytest.raises(DataBombError, match=f"deep.yaml' nests lists or mappings more than {MAX_DEPTH} levels"):
        load_yaml("h: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5), "'deep.yaml'")
    assert load_yaml("h: " + "[" * 20 + "]" * 20, "'ok.yaml'")["h"] is not None
    nested: list = []
    for _ in range(20):
        nested = [nested]
    # the dict, its two keys, "text", and the 21 nested lists
    assert check_expanded_size({"a": nested, "b": "text"}, "x") == 1 + 2 + 1 + 21


# ------------------------------------------------------------------------------------------------ classes, functions
class Encoder(nn.Module):
    def __init__(self, features: int, latent: int, act_fn: type) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, latent), act_fn())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class WideEncoder(Encoder):
    pass


class AutoEncoder(accelkit.Module):
    """phlippe's autoencoder tutorial: the encoder and decoder *classes*, an activation class and a loss function
    given to ``__init__``, all saved by ``save_hyperparameters()``."""

    def __init__(self, latent_dim: int, encoder_class: type = Encoder, decoder_class: type = nn.Linear,
                 act_fn: type = nn.GELU, loss_fn: Any = nn.functional.mse_loss) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = encoder_class(4, latent_dim, act_fn)
        self.decoder = decoder_class(latent_dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.hparams.loss_fn(self(batch[0]), batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_class_and_function_hyperparameters_round_trip_through_the_best_checkpoint(tmp_path):
    """Issue 38.5: classes and functions given to ``__init__`` are stored as ``module:qualname`` references (plain
    data: the checkpoint loads with ``weights_only=True``) and ``load_from_checkpoint(best)`` builds the module with
    them (accelkit left them out, with a warning, and built the defaults: here a different encoder)."""
    model = AutoEncoder(2, encoder_class=WideEncoder, act_fn=nn.Tanh, loss_fn=nn.functional.l1_loss)
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, default_root_dir=tmp_path)
    data = torch.utils.data.TensorDataset(torch.randn(8, 4, generator=torch.Generator().manual_seed(0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=4))
    assert not [str(w.message) for w in caught if "hyper-parameter" in str(w.message)]
    best = trainer.checkpoint_callback.best_model_path
    stored = torch.load(best, weights_only=True)["hyper_parameters"]
    assert stored["encoder_class"] == {"__reference__": f"{__name__}:WideEncoder"}
    assert stored["act_fn"] == {"__reference__": "torch.nn.modules.activation:Tanh"}
    assert stored["loss_fn"] == {"__reference__": "torch.nn.functional:l1_loss"}
    loaded = AutoEncoder.load_from_checkpoint(best)
    assert type(loaded.encoder) is WideEncoder and isinstance(loaded.encoder.net[1], nn.Tanh)
    assert loaded.hparams.loss_fn is nn.functional.l1_loss and loaded.hparams.decoder_class is nn.Linear
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_a_reference_resolves_only_from_modules_already_imported(tmp_path):
    """A stored class whose module this process has not imported is refused, naming the hyper-parameter and what to
    pass, though the module could be imported from ``sys.path``: loading a checkpoint imports and runs nothing."""
    from accelkit.checkpoint.files import CheckpointError
    from helpers.cli_runs import project_imports

    (tmp_path / "blocks_of_38.py").write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('ran.txt').write_text('imported')\n"
        "import torch\n\n\n"
        "class Block(torch.nn.Linear):\n    pass\n\n\nNOT_A_CLASS = 3\n")

    class Holder(HyperparametersMixin, nn.Module):
        def __init__(self, block_class: type = nn.Linear) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.block = block_class(2, 2)

    with project_imports(tmp_path):
        sys.path.insert(0, str(tmp_path))
        from blocks_of_38 import Block  # type: ignore[import-not-found]

        path = write_checkpoint(Holder(Block), tmp_path / "holder.ckpt")
        assert type(Holder.load_from_checkpoint(path).block) is Block  # the program that defined it loads it
        del sys.modules["blocks_of_38"]  # as in a process that never imported it; the file stays importable
        (tmp_path / "ran.txt").unlink()
        with pytest.raises(CheckpointError, match=re.escape(
                f"checkpoint {str(path)!r}: hyper-parameter 'block_class' is the reference 'blocks_of_38:Block', "
                "and its module 'blocks_of_38' is not imported in this process; accelkit resolves a stored class "
                "or function only from modules this process has already imported (loading a checkpoint imports "
                "and runs nothing). Import it first, or pass it: load_from_checkpoint(path, block_class=...)")):
            Holder.load_from_checkpoint(path)
        assert "blocks_of_38" not in sys.modules and not (tmp_path / "ran.txt").exists()
        assert type(Holder.load_from_checkpoint(path, block_class=nn.Linear).block) is nn.Linear  # what it says

        planted = torch.load(path, weights_only=True)
        for reference, why in (("torch.nn:NOT_THERE", "holds no class or function 'NOT_THERE'"),
                               ("torch.nn", "not of the form 'module:qualname'"),
                               ("torch:float32", "holds no class or function 'float32'")):
            planted["hyper_parameters"]["block_class"] = {"__reference__": reference}
            with pytest.raises(CheckpointError, match=re.escape(why)):
                Holder.load_from_checkpoint(save(planted, tmp_path / "planted.ckpt"))
