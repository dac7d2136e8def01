"""``legacy_names``: stand-ins for removed torch_xla 1.x names, installed and removed around an XLA run.

Pure Python: the stand-ins go on module objects made here (not torch_xla's; the real ones are exercised in
``test_sampler_xla.py`` and ``test_seed_guide.py``).
"""

from __future__ import annotations

import itertools
import sys
import types
import warnings

import pytest

pytest.importorskip("accelkit_xla_spawn", reason="the accelkit-xla-spawn plugin is not installed")

from accelkit_xla_spawn import legacy_names  # noqa: E402
from accelkit_xla_spawn.legacy_names import LegacyName, TorchXLALegacyNameWarning  # noqa: E402
from accelkit_xla_spawn.removed_api import REPLACEMENTS  # noqa: E402

_serial = itertools.count()


@pytest.fixture
def fake_module():
    """A module object standing in for ``torch_xla.core.xla_model``, registered under a name of its own."""
    name = f"accelkit_fake_xla_model_{next(_serial)}"  # a new name per test: each warns afresh
    module = types.ModuleType(name)
    module.still_defined = lambda: "torch_xla's own"
    sys.modules[name] = module
    yield module
    del sys.modules[name]


def _names(module: types.ModuleType) -> tuple[LegacyName, ...]:
    return (LegacyName(module.__name__, "world_of_old", "xm.world_of_old()", "new.world()", lambda: 4),
            LegacyName(module.__name__, "still_defined", "xm.still_defined()", "new.defined()", lambda: "stand-in"))


def test_a_stand_in_answers_and_warns_once_per_process(fake_module) -> None:
    assert legacy_names.install(_names(fake_module)) == [f"{fake_module.__name__}.world_of_old"]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # Python's own dedup is off: only ours holds repeats back
            assert [fake_module.world_of_old(), fake_module.world_of_old(), fake_module.world_of_old(1)] == [4, 4, 4]
        assert [w.category for w in caught] == [TorchXLALegacyNameWarning]
        message = str(caught[0].message)
        assert message.startswith("xm.world_of_old() is a torch_xla 1.x name that torch_xla 2.x removed")
        assert "Use new.world() instead" in message
        assert caught[0].filename == __file__  # points at the caller's line
        assert fake_module.still_defined() == "torch_xla's own"  # a name the module defines is never replaced
        with pytest.raises(TypeError):
            fake_module.world_of_old(1, 2)  # the 1.x signature: one optional default, nothing else
    finally:
        assert legacy_names.uninstall() == [f"{fake_module.__name__}.world_of_old"]
    assert not hasattr(fake_module, "world_of_old")


def test_installs_are_counted_and_the_last_uninstall_removes(fake_module) -> None:
    assert legacy_names.install(_names(fake_module))
    assert legacy_names.install(_names(fake_module)) == []  # a second replica (thread) of the same process
    assert legacy_names.uninstall() == []
    with pytest.warns(TorchXLALegacyNameWarning):
        assert fake_module.world_of_old() == 4  # the other replica still runs
    assert legacy_names.uninstall() == [f"{fake_module.__name__}.world_of_old"]
    assert legacy_names.installed() == [] and not hasattr(fake_module, "world_of_old")
    assert legacy_names.uninstall() == []  # one too many: nothing happens


def test_a_name_replaced_since_is_left_alone(fake_module) -> None:
    legacy_names.install(_names(fake_module))
    fake_module.world_of_old = own = lambda: 99
    assert legacy_names.uninstall() == []
    assert fake_module.world_of_old is own


def test_a_failed_install_leaves_nothing_behind(fake_module) -> None:
    broken = _names(fake_module)[:1] + (LegacyName("accelkit_no_such_module_here", "x", "x()", "y()", lambda: 0),)
    with pytest.raises(ModuleNotFoundError):
        legacy_names.install(broken)
    assert not hasattr(fake_module, "world_of_old") and legacy_names.installed() == []
    assert legacy_names.install(_names(fake_module))  # the count is back at 0: this is a first install again
    assert legacy_names.uninstall()


def test_the_stand_ins_cover_the_removed_names_and_agree_with_the_error_hints() -> None:
    assert [(n.module, n.name) for n in legacy_names.LEGACY_NAMES] == [
        ("torch_xla.core.xla_model", "xrt_world_size"), ("torch_xla.core.xla_model", "get_ordinal"),
        ("torch_xla.runtime", "using_pjrt")]
    for legacy in legacy_names.LEGACY_NAMES:
        assert REPLACEMENTS[legacy.name].split(" ")[0] in legacy.replacement
    assert legacy_names.LEGACY_NAMES[2].answer() is True  # PJRT is the only runtime
