"""Configuration errors that name the key, the bad value, what is accepted and the closest key.

jsonargparse's messages already name the key and the given value; :func:`explain` puts a one-line summary in
front: for an unknown key the closest known one (``trainer.max_epoch`` -> ``trainer.max_epochs``), for a bad value
the accepted types or choices.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

_UNKNOWN = (re.compile(r"does not accept option '([^']+)'"),
            re.compile(r"unrecognized arguments: (--?[\w.\-]+)"),
            re.compile(r"Key '([^']+)' is not expected"),
            re.compile(r'Key "([^"]+)" is not expected'),
            re.compile(r"No action for key \"([^\"]+)\""),
            re.compile(r"No action for key '([^']+)'"))
_BAD_VALUE = re.compile(r'Parser key "([^"]+)":')
_GIVEN = re.compile(r"Given value: (.*)")
_EXPECTED = re.compile(r"Expected a (?:<class '([\w.]+)'>|(\S+))")
_CHOICES = re.compile(r"Expected a (typing\.Literal\[[^\]]*\]|Literal\[[^\]]*\])")


def known_keys(parser: Any, prefix: str = "") -> list[str]:
    """Every dotted key ``parser`` accepts (those of its sub-commands too, without the sub-command name)."""
    keys: list[str] = []
    for action in getattr(parser, "_actions", []):
        for option in getattr(action, "option_strings", []):
            if option.startswith("--"):
                keys.append(prefix + option[2:])
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for sub in choices.values():
                if hasattr(sub, "_actions"):
                    keys.extend(known_keys(sub, prefix))
        dest = getattr(action, "dest", "")
        if dest and "." in dest and not dest.startswith("-"):
            keys.append(prefix + dest)
    return sorted(set(keys))


def close_key(key: str, keys: list[str]) -> str | None:
    """The known key closest to ``key`` (compared as a whole and by its last part), or ``None``."""
    key = key.lstrip("-").split("=", 1)[0]
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
    if close:
        return close[0]
    group, _, name = key.rpartition(".")
    same_group = [k for k in keys if k.rpartition(".")[0] == group]
    close = difflib.get_close_matches(name, [k.rpartition(".")[2] for k in same_group], n=1, cutoff=0.6)
    return f"{group}.{close[0]}" if close and group else (close[0] if close else None)


def _accepted(message: str) -> str:
    choices = [c.replace("typing.", "") for c in _CHOICES.findall(message)]
    found = [a or b for a, b in _EXPECTED.findall(message) if not (b or "").startswith(("typing.Literal", "Literal"))]
    return ", ".join(dict.fromkeys(choices + ["null" if f == "NoneType" else f for f in found]))


def explain(parser: Any, message: str) -> str:
    """``message`` (a jsonargparse error) with a summary line: the unknown key and the close known one, or the
    key, the given value and the accepted types."""
    for pattern in _UNKNOWN:
        match = pattern.search(message)
        if match:
            key = match.group(1).lstrip("-")
            close = close_key(key, known_keys(parser))
            hint = f" Did you mean {close!r}?" if close else ""
            return f"unknown key {key!r}.{hint} (`--help` lists every key)\n{message}"
    match = _BAD_VALUE.search(message)
    if match:
        given = _GIVEN.search(message)
        value = given.group(1).strip() if given else "?"
        accepted = _accepted(message)
        return (f"{match.group(1)}: value {value!r} is not accepted"
                + (f"; accepted: {accepted}" if accepted else "") + f"\n{message}")
    return message
