"""Plugins: discovery through the ``accelkit`` entry-point group, the one registry of named implementations,
the core's own registrations, and composing a run from the Trainer's strings.

Modules: ``manager`` (finding and loading plugins), :mod:`~accelkit.plugins.registry`
(the one registry: accelerators, strategies, precisions, cluster environments, loggers and commands by name,
conflicts), ``builtin`` (the core's hook implementations), :mod:`~accelkit.plugins.compose`
(strings to one composed run, logger names to loggers).
"""

from accelkit.plugins.manager import (
                                      BLOCK_ENV,
                                      BLOCKED,
                                      DISABLE_AUTOLOAD_ENV,
                                      DUPLICATE,
                                      ENTRY_POINT_GROUP,
                                      FAILED,
                                      INCOMPATIBLE,
                                      LOADED,
                                      PluginInfo,
                                      PluginManager,
                                      PluginModule,
                                      portable_plugins,
                                      resolve_plugins,
                                      suggest,
)
from accelkit.plugins.registry import Conflict, Registry

__all__ = ["BLOCKED", "BLOCK_ENV", "Conflict", "DISABLE_AUTOLOAD_ENV", "DUPLICATE", "ENTRY_POINT_GROUP", "FAILED",
           "INCOMPATIBLE", "LOADED", "PluginInfo", "PluginManager", "PluginModule", "Registry", "portable_plugins",
           "resolve_plugins", "suggest"]
