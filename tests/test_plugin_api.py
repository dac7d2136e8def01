"""The plugin author's contract stays stable within a major hook API version: every name ``docs/plugins.rst`` offers
plugins is listed in ``tests/data/plugin_api.json`` (written by ``tests/helpers/plugin_api.py``), a public name added
since included; none may disappear or lose a parameter, and a removed name keeps working with a ``DeprecationWarning``
naming its replacement until the next major version."""

from __future__ import annotations

import copy
import importlib
import warnings

import pytest

from accelkit import HOOK_API_VERSION
from accelkit.utilities.deprecation import DEPRECATED
from helpers import plugin_api


def test_every_listed_plugin_name_is_still_there_with_its_parameters():
    assert plugin_api.check(plugin_api.load()) == []


def test_every_public_name_of_the_extension_points_is_listed():
    assert plugin_api.unlisted(plugin_api.load()) == []


def test_a_public_name_added_without_listing_it_fails(monkeypatch):
    from accelkit import Precision

    # a method made public since the listing was written (as Precision.passes_through once was)
    monkeypatch.setattr(Precision, "keeps_its_buffers", lambda self: True, raising=False)
    problems = plugin_api.unlisted(plugin_api.load())
    assert "accelkit:Precision.keeps_its_buffers is public but not listed in plugin_api.json: run python " \
           "tests/helpers/plugin_api.py to list it, so that it may not disappear or lose a parameter before the next " \
           "major hook API version" in problems
    # the subclasses plugins use inherit it, and are listed with their own names
    assert any(p.startswith("accelkit:MixedPrecision.keeps_its_buffers ") for p in problems)


def test_the_check_fails_when_a_listed_name_disappears_or_loses_a_parameter():
    listing = copy.deepcopy(plugin_api.load())
    # a scratch listing as it would read had the current names had one more name and parameter in the last release
    listing["names"]["accelkit.records:DeviceRecord"] = ["name"]
    listing["names"]["accelkit.hookspecs:accelkit_diagnose"].append("manager")
    listing["hook_api"] = "1.2"
    assert sorted(plugin_api.check(listing, "1.4")) == [
        "accelkit.hookspecs:accelkit_diagnose lost parameter(s) manager in hook API 1.4: plugins calling or "
        "implementing it with them break; removing a parameter needs a major version",
        "accelkit.records:DeviceRecord (hook API 1.2) is gone in hook API 1.4: keep it until the next major version, "
        "or serve it from accelkit.utilities.deprecation.DEPRECATED with a warning naming its replacement"]
    assert plugin_api.check(listing, "2.0") == []  # a major version may remove names


def test_the_check_fails_when_the_code_drops_a_listed_method(monkeypatch):
    from accelkit.records import CommandRecord

    monkeypatch.delattr(CommandRecord, "load_run")
    listed = plugin_api.load()["hook_api"]
    assert plugin_api.check(plugin_api.load()) == [
        f"accelkit.records:CommandRecord.load_run (hook API {listed}) is gone in hook API {HOOK_API_VERSION}: keep it "
        "until the next major version, or serve it from accelkit.utilities.deprecation.DEPRECATED with a warning "
        "naming its replacement"]


def test_the_listing_covers_the_names_the_plugin_docs_offer():
    names = plugin_api.load()["names"]
    specs = [n for n in vars(importlib.import_module("accelkit.hookspecs")) if n.startswith("accelkit_")]
    assert {f"accelkit.hookspecs:{n}" for n in specs} <= set(names)
    for name in ("accelkit.records:CommandRecord", "accelkit:Strategy.setup_module", "accelkit:Accelerator.device",
                 "accelkit.environments:ClusterEnvironment.detect", "accelkit.plugins:PluginManager.registry",
                 "accelkit.loggers:VersionedLogger.version_dir", "accelkit.cli:command"):
        assert name in names


@pytest.mark.parametrize("dotted", sorted(DEPRECATED))
def test_a_deprecated_name_works_with_a_warning_naming_its_replacement_until_the_next_major(dotted):
    deprecation = DEPRECATED[dotted]
    assert int(HOOK_API_VERSION.split(".")[0]) < int(deprecation.removed_in.split(".")[0]), (
        f"{dotted} was to be removed in hook API {deprecation.removed_in}: remove it from DEPRECATED")
    module, _, name = dotted.rpartition(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(module), name)
    assert callable(value)
    assert [str(w.message) for w in caught] == [
        f"{dotted} is deprecated since hook API {deprecation.since} and will be removed in {deprecation.removed_in}: "
        f"use {deprecation.replacement} instead"]
    assert caught[0].category is DeprecationWarning and caught[0].filename == __file__


# ------------------------------------------------------------------- private names a plugin uses (issue 36, item 9)
def test_every_form_of_a_private_core_name_is_found_in_a_plugins_source():
    from accelkit.plugins.private_names import scan_source

    source = (
        "import accelkit\n"                                                # 1
        "import accelkit.loggers.tensorboard as tb\n"                      # 2
        "from accelkit.loggers.tensorboard import _flatten, TensorBoardLogger\n"  # 3
        "from accelkit.loggers import tensorboard\n"                       # 4
        "from accelkit._private_module import thing\n"                     # 5
        "import accelkit.__about__\n"                                      # 6: a dunder is not private
        "from accelkit import __version__, Trainer\n"                      # 7
        "a = accelkit.loggers.tensorboard._flatten\n"                      # 8
        "b = tb._something.deeper\n"                                       # 9
        "c = tensorboard._flatten({})\n"                                   # 10
        "d = accelkit.strategies.DDPStrategy._env\n"                       # 11: a class's private method
        "e = self._own_thing\n"                                            # 12: not the core's
        "import torch\n"
        "f = torch._C\n"                                                   # 14: not the core's
    )
    found = [(use.name, use.module, use.line) for use in scan_source(source, "plugin.py")]
    assert found == [
        ("accelkit.loggers.tensorboard._flatten", "accelkit.loggers.tensorboard", 3),
        ("accelkit._private_module", "accelkit", 5),
        ("accelkit.loggers.tensorboard._flatten", "accelkit.loggers.tensorboard", 8),
        ("accelkit.loggers.tensorboard._something", "accelkit.loggers.tensorboard", 9),
        ("accelkit.loggers.tensorboard._flatten", "accelkit.loggers.tensorboard", 10),
        ("accelkit.strategies.DDPStrategy._env", "accelkit.strategies.DDPStrategy", 11),
    ]


def test_a_plugin_source_that_does_not_parse_reports_nothing_rather_than_failing():
    from accelkit.plugins.private_names import scan_source

    assert scan_source("from accelkit.x import _y\ndef broken(:\n", "broken.py") == []
