"""What a configuration file can build: classes, where the argument's annotation asks for one, and nothing else.

jsonargparse builds a ``{class_path: ..., init_args: ...}`` value wherever it finds one, also for an argument typed
``Any``, ``object`` or not typed, and calls a function named by a ``class_path`` as if it were a class, so that a
configuration file such as ``extra: {class_path: os.system, init_args: {command: ...}}`` runs a shell command
(Lightning's CLI does the same). accelkit's parser (:class:`accelkit.cli.config.ArgumentParser`) applies two rules
around every parse, dump and build:

- :func:`values_of_any_stay_data`: a value given for an argument typed ``Any``, ``object`` or not typed is kept as
  the plain data the file holds (with a warning naming the class path); nothing it names is imported or called;
- :func:`only_classes_are_built`: where the annotation is a class (or a ``Callable`` returning one), the class
  path is imported and must name a subclass of it (jsonargparse's check); a class path naming a function or any
  other object is refused before anything is called.

So a class path is imported only where the annotation is a class, and built only when it names a subclass of that
class. Importing a module runs its top-level code: a configuration file from someone else is code, to be read
before it is run (``docs/cli.rst``).

The two rules replace two private jsonargparse functions (``_typehints.adapt_classes_any`` and
``ActionTypeHint.get_class_parser``), which is why the ``cli`` extra pins ``jsonargparse<5``: jsonargparse's public
settings do not say the first rule (``set_parsing_settings(instantiate_subclass_spec_in_any=False)``, new in 4.51,
keeps the value unbuilt, but parsing it still imports the module it names). Where jsonargparse has an import path
policy (4.53), importing this module turns it on with jsonargparse's default denylist (``os``, ``subprocess``,
``builtins.eval`` ...), as jsonargparse 5 will: a value naming such a path is refused by jsonargparse, where 4.x only
warns that 5 will refuse it. The setting is jsonargparse's, for the whole process.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from jsonargparse import Namespace, set_parsing_settings
from jsonargparse import _actions as _jsonargparse_actions  # its import_object, wrapped below
from jsonargparse import _typehints as _jsonargparse_typehints  # the two functions replaced below

from accelkit.cli.saved_config import import_class_path, import_file_form, is_file_form
from accelkit.errors import ConfigurationError

if not (callable(getattr(_jsonargparse_typehints, "adapt_classes_any", None))  # pragma: no cover - jsonargparse 5
        and isinstance(_jsonargparse_typehints.ActionTypeHint.__dict__.get("get_class_parser"),
                       staticmethod)):
    raise ImportError("this jsonargparse lacks adapt_classes_any or ActionTypeHint.get_class_parser, which accelkit "
                      "replaces so that a configuration cannot build classes for arguments typed Any; install "
                      "jsonargparse>=4.27,<5")

if "import_path_denylist" in inspect.signature(set_parsing_settings).parameters:  # jsonargparse >= 4.53
    # no entry added: naming the policy enforces jsonargparse's default denylist now, as version 5 will by default
    set_parsing_settings(import_path_denylist=[])


_Value = TypeVar("_Value")


def _as_given(value: _Value, typehint: object, serialize: bool, instantiate: bool, *args: object,
              **kwargs: object) -> _Value:
    """What an argument typed ``Any`` or ``object`` receives: the value as the configuration gives it. A class path
    given for an argument without annotation is refused (:class:`UntypedClassPath`)."""
    if not serialize and not instantiate and isinstance(typehint, _jsonargparse_typehints.UntypedType):
        paths = sorted(set(class_paths_in(value)))
        if paths:
            raise UntypedClassPath(paths[0])
    if not serialize and not instantiate:
        for path in sorted(set(class_paths_in(value))):
            warnings.warn(f"the configuration value naming class_path {path!r} is given for an argument typed "
                          f"{typehint!r} (any value) and stays plain data (a dict), not built: accelkit builds a "
                          "class_path only where the argument's annotation is a class; annotate the argument with "
                          "the base class it accepts to have the value built", UserWarning, stacklevel=2)
    return value


class UntypedClassPath(ValueError):
    """A ``{class_path: ...}`` value given for an ``__init__`` argument without annotation: accelkit does not build
    it (nothing the annotation does not ask for is imported) and does not pass the dict on (the program would fail
    later, calling it); the message says which annotation builds it."""

    def __init__(self, class_path: str) -> None:
        self.class_path = class_path
        super().__init__(f"class_path {class_path!r} is given for an argument without a type annotation: accelkit "
                         "builds a class_path only where the annotation asks for a class, and does not pass the dict "
                         f"on. Annotate the argument with a class it accepts ({class_path.rpartition('.')[2]} itself "
                         "or a base class of it, such as torch.nn.Module) to have it built, or with Any or dict to "
                         "receive the dict as data")


def class_paths_in(value: object) -> Iterator[str]:
    """Every ``class_path`` string inside ``value`` (nested dicts and lists)."""
    if isinstance(value, dict):
        if isinstance(value.get("class_path"), str):
            yield value["class_path"]
        for item in value.values():
            yield from class_paths_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from class_paths_in(item)


@contextlib.contextmanager
def values_of_any_stay_data() -> Iterator[None]:
    """While parsing, dumping or building: a ``{class_path: ..., init_args: ...}`` value given for an argument typed
    ``Any``, ``object`` or not typed stays the dict it is (with a warning naming the class path); nothing it names is
    imported or called."""
    hints = _jsonargparse_typehints.ActionTypeHint
    original, original_parser = _jsonargparse_typehints.adapt_classes_any, hints.__dict__["get_class_parser"]
    importers = [(module, module.import_object) for module in (_jsonargparse_typehints, _jsonargparse_actions)]
    # replacing jsonargparse's function on purpose (restored below) with ours, whose signature differs in names
    _jsonargparse_typehints.adapt_classes_any = _as_given  # type: ignore[assignment]
    # when merging two configurations, jsonargparse takes a class_path dict of an Any argument for a class to build
    # and asks for the parser of the class it names, by name: give it no arguments unless the path names a class
    # imported already (those of annotated arguments are, by the subclass check); a function such as os.system is
    # not looked up again, which jsonargparse's import path policy would refuse although the value stays data
    # (replacing jsonargparse's method on purpose, and putting it back below)
    hints.get_class_parser = staticmethod(lambda val_class, *args, **kwargs: original_parser.__func__(  # type: ignore[method-assign]
        val_class if not isinstance(val_class, str) or _imported_class(val_class) else object, *args, **kwargs))
    for module, importer in importers:  # where jsonargparse imports a class path (the annotation asks for a class)
        module.import_object = _file_forms_too(importer)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        _jsonargparse_typehints.adapt_classes_any = original
        hints.get_class_parser = original_parser  # type: ignore[method-assign]
        for module, importer in importers:
            module.import_object = importer  # type: ignore[attr-defined]


def _file_forms_too(importer: Callable[..., object]) -> Callable[..., object]:
    """jsonargparse's ``import_object``, which also imports a file-form class path (``lib/nets.py:Net``, see
    :func:`~accelkit.cli.saved_config.import_file_form`): jsonargparse calls it only where the argument's annotation
    asks for a class, so a file named in a value of an ``Any`` argument is never imported."""
    def import_object(name: str, *args: object, **kwargs: object) -> object:
        return import_file_form(name) if is_file_form(name) else importer(name, *args, **kwargs)

    return import_object


def _imported_class(path: str) -> bool:
    """Whether a dotted path names a class of a module imported already (looked up without importing)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found: object = sys.modules.get(".".join(parts[:cut]))
        if found is None:
            continue
        for name in parts[cut:]:
            found = getattr(found, name, None)
        return inspect.isclass(found)
    return False


def only_classes_are_built(config: object, key: str = "") -> None:
    """Refuse a parsed configuration in which a class path to be built names something other than a class.

    :param config: a parsed configuration (jsonargparse ``Namespace``); the values to be built are the
        ``Namespace`` entries with a ``class_path`` (the plain dicts of ``Any`` arguments are data, not checked).
    :raise ConfigurationError: naming the key and the class path.
    """
    if isinstance(config, Namespace):
        path = config.get("class_path") if "class_path" in config else None
        named = import_class_path(path) if isinstance(path, str) else None
        if isinstance(path, str) and not inspect.isclass(named):
            kind = "function" if callable(named) else type(named).__name__
            raise ConfigurationError(f"{key or 'the configuration'}: class_path {path!r} names a {kind}, not a class; "
                                     "a configuration builds only classes (a subclass of the argument's annotation), "
                                     "so name a class there")
        items: Iterable[tuple[str, object]] = config.items(branches=True, nested=False)
    elif isinstance(config, dict):
        items = config.items()
    elif isinstance(config, (list, tuple)):
        items = ((f"[{index}]", item) for index, item in enumerate(config))
    else:
        return
    for name, value in items:
        only_classes_are_built(value, f"{key}.{name}".lstrip(".").replace(".[", "["))
