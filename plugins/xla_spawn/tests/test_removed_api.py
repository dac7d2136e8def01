"""``removed_api_hint``: which errors get the torch_xla 2.x replacement (pure Python; imports no torch_xla).

The errors are real ones, raised by Python for a module object named like torch_xla's ``xla_model`` that lacks
the 1.x names, as torch_xla 2.x's does (the real module is used in ``test_sampler_xla.py``).
"""

from __future__ import annotations

import pickle
import sys
import types

import pytest

pytest.importorskip("accelkit_xla_spawn", reason="the accelkit-xla-spawn plugin is not installed")

from accelkit_xla_spawn import REPLACEMENTS, add_removed_api_hint, removed_api_hint  # noqa: E402

XM = types.ModuleType("torch_xla.core.xla_model")
RUNTIME = types.ModuleType("torch_xla.runtime")


def _error(module: types.ModuleType, name: str) -> AttributeError:
    try:
        getattr(module, name)
    except AttributeError as exc:
        return exc
    raise AssertionError("no error")


@pytest.mark.parametrize("name, replacement", [("xrt_world_size", "torch_xla.runtime.world_size()"),
                                               ("get_ordinal", "torch_xla.runtime.global_ordinal()"),
                                               ("get_local_ordinal", "torch_xla.runtime.local_ordinal()")])
def test_the_guides_names_get_their_replacement(name, replacement):
    exc = _error(XM, name)
    assert add_removed_api_hint(exc) is True
    message = str(exc)
    assert message.startswith(f"module 'torch_xla.core.xla_model' has no attribute '{name}' (")
    assert f"torch_xla.core.xla_model.{name} is from torch_xla 1.x" in message
    assert f"use {replacement} instead" in message
    assert exc.name == name and exc.obj is XM  # the same exception object, attributes kept
    assert add_removed_api_hint(exc) is False and str(exc) == message  # added once


def test_a_runtime_name_gone_in_2x():
    exc = _error(RUNTIME, "using_pjrt")
    assert "PJRT is the only runtime" in removed_api_hint(exc)


def test_an_error_that_crossed_a_process_boundary_is_recognised_by_its_message():
    exc = pickle.loads(pickle.dumps(_error(XM, "get_ordinal")))
    assert exc.name is None  # pickling drops name/obj
    assert "torch_xla.runtime.global_ordinal()" in removed_api_hint(exc)


def test_an_import_error_for_a_removed_name():
    sys.modules["torch_xla_hint_probe"] = types.ModuleType("torch_xla_hint_probe")
    try:
        exec("from torch_xla_hint_probe import xrt_world_size")
    except ImportError as exc:
        assert removed_api_hint(exc) is None  # not a torch_xla module
    finally:
        del sys.modules["torch_xla_hint_probe"]
    exc = ImportError("cannot import name 'xrt_world_size' from 'torch_xla.core.xla_model' (/x/xla_model.py)")
    assert add_removed_api_hint(exc)
    assert "torch_xla.runtime.world_size()" in str(exc)


@pytest.mark.parametrize("exc", [
    _error(types.ModuleType("mytools"), "get_ordinal"),   # the same name on another module
    _error(XM, "no_such_thing"),                          # a torch_xla name that is not a known 1.x one
    _error(object(), "xrt_world_size"),                   # not a module at all
    ValueError("module 'torch_xla.core.xla_model' has no attribute 'get_ordinal'"),  # another type
])
def test_other_errors_are_left_alone(exc):
    before = str(exc)
    assert removed_api_hint(exc) is None
    assert add_removed_api_hint(exc) is False and str(exc) == before


def test_every_replacement_is_in_the_guides_table():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "tpu.rst").read_text().splitlines()
    for name, replacement in REPLACEMENTS.items():
        rows = [line for line in guide if line.startswith((f"``xm.{name}()``", f"``xr.{name}()``"))]
        assert len(rows) == 1, name
        assert replacement.split(" ")[0].rsplit(".", 1)[-1] in rows[0], (name, rows[0])
