"""Parsing helpers: :class:`AttributeDict`, the dict whose keys are attributes (``hparams.lr``)."""

from __future__ import annotations

from typing import Any


class AttributeDict(dict):
    """A :class:`dict` whose keys are also attributes: ``hparams.lr`` is ``hparams["lr"]``.

    Setting or deleting an attribute sets or deletes the key. Its ``repr`` lists one key per line.
    """

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):  # copy/pickle probes are never keys
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            known = ", ".join(map(repr, self)) or "none"
            raise AttributeError(f"no hyper-parameter {name!r} (saved: {known})") from None

    def __setattr__(self, name: str, value: object) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def copy(self) -> AttributeDict:
        """A shallow copy, still an :class:`AttributeDict`."""
        return AttributeDict(self)

    def __repr__(self) -> str:
        if not self:
            return "AttributeDict()"
        width = max(len(repr(key)) for key in self)
        lines = [f"    {repr(key) + ':':<{width + 1}} " + repr(value).replace("\n", "\n    ")
                 for key, value in self.items()]
        return "AttributeDict(\n" + "\n".join(lines) + "\n)"
