"""``LambdaCallback``: a callback made of functions, one per hook."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from accelkit.callbacks.base import Callback

#: the hooks a LambdaCallback takes: every hook of :class:`~accelkit.Callback` (not ``state_dict``/
#: ``load_state_dict``, which are not hooks)
HOOK_NAMES = frozenset(name for name in vars(Callback) if name.startswith("on_") or name in ("setup", "teardown"))

_CLASSES: dict[tuple[type, frozenset[str]], type] = {}


def _hook(name: str) -> Callable[..., object]:
    def call(self: LambdaCallback, *args: object, **kwargs: object) -> object:
        return self.hooks[name](*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"Calls the function given as ``{name}=``."
    return call


def _class_for(base: type, names: frozenset[str]) -> type:
    """A subclass of ``base`` (LambdaCallback or a user's subclass of it) that overrides exactly the hooks
    ``names`` (the Trainer calls only the hooks a callback's class overrides, so those not given cost nothing)."""
    cls = _CLASSES.get((base, names))
    if cls is None:
        namespace: dict[str, object] = {name: _hook(name) for name in names}
        namespace.update(__module__=base.__module__, __qualname__=base.__qualname__, _user_class=base)
        cls = _CLASSES[(base, names)] = type(base.__name__, (base,), namespace)
    return cls


def _rebuild(base: type, hooks: dict[str, Callable[..., object]]) -> LambdaCallback:
    """Unpickle a LambdaCallback (or a subclass's instance) without calling its ``__init__`` again."""
    callback: LambdaCallback = object.__new__(_class_for(base, frozenset(hooks)))
    callback.hooks = dict(hooks)
    return callback


class LambdaCallback(Callback):
    """A callback from functions given by hook name (Lightning's ``LambdaCallback``)::

        LambdaCallback(on_train_epoch_end=lambda trainer, pl_module: print(trainer.current_epoch))

    Each keyword is the name of a :class:`~accelkit.Callback` hook (``setup``, ``teardown``, ``on_*``) and its
    value a function called with that hook's arguments (``trainer, pl_module, ...``). An unknown name or a value
    that is not callable raises ``TypeError`` naming it. With a process-starting strategy (``ddp_spawn``) the
    functions travel to the workers by pickling: use functions defined at module level, not lambdas.

    :param hook_functions: ``hook_name=function`` pairs.
    """

    #: on the per-hooks subclasses only: the class the user instantiated
    _user_class: type[LambdaCallback] | None = None

    def __new__(cls, **hook_functions: Callable[..., object]) -> LambdaCallback:
        unknown = sorted(set(hook_functions) - HOOK_NAMES)
        if unknown:
            hints = [f"{name!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
                name, sorted(HOOK_NAMES), n=1)) else "") for name in unknown]
            raise TypeError(f"LambdaCallback got unknown hook name(s): {', '.join(hints)}; the hooks are "
                            f"{', '.join(sorted(HOOK_NAMES))}")
        not_callable = sorted(name for name, fn in hook_functions.items() if not callable(fn))
        if not_callable:
            raise TypeError("LambdaCallback needs functions; not callable: " + ", ".join(
                f"{name}={hook_functions[name]!r}" for name in not_callable))
        base = cls._user_class or cls
        return super().__new__(_class_for(base, frozenset(hook_functions)))

    def __init__(self, **hook_functions: Callable[..., object]) -> None:
        #: the functions, by hook name
        self.hooks: dict[str, Callable[..., object]] = dict(hook_functions)

    def __reduce__(self) -> tuple[object, ...]:
        # the per-hooks subclass is made at run time: pickle the functions and rebuild (spawned workers)
        state = {k: v for k, v in self.__dict__.items() if k != "hooks"}
        return _rebuild, (type(self)._user_class, self.hooks), state or None
