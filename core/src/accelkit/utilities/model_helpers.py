"""Questions about a user's classes: does it override a hook? (Lightning's ``utilities.model_helpers``)."""

from __future__ import annotations


def is_overridden(method_name: str, instance: object, parent: type) -> bool:
    """Whether ``instance``'s class defines ``method_name`` differently from ``parent``: the one test the core uses
    to decide that a hook, a loader method or a strategy step was customised (and must be called).

    ``parent`` is the base whose definition counts as "not overridden" (``Module``, ``Callback``, ``Strategy``...).
    """
    mine = getattr(type(instance), method_name, None)
    return mine is not None and mine is not getattr(parent, method_name, None)
