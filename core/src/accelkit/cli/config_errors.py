"""Configuration errors that name the key, the bad value, what is accepted and the closest key.

jsonargparse's messages already name the key and the given value; :func:`explain` puts a one-line summary in
front: for an unknown key the closest known one (``trainer.max_epoch`` -> ``trainer.max_epochs``), for a bad value
the accepted types or choices.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from jsonargparse import ArgumentParser

_UNKNOWN = (re.compile(r"does not accept option '([^']+)'"),
            re.compile(r"unrecognized arguments: (--?[\w.\-]+)"),
            re.compile(r"Key '([^']+)' is not expected"),
            re.compile(r'Key "([^"]+)" is not expected'),
            re.compile(r"No action for key \"([^\"]+)\""),
            re.compile(r"No action for key '([^']+)'"))
_BAD_VALUE = re.compile(r'Parser key "([^"]+)":')
_GIVEN = re.compile(r"Given value: (.*)")
_EXPECTED = re.compile(r"Expected a (?:<class '([\w.]+)'>|(\S+))")
_CLASS_OPTION = re.compile(r'Parser key "([^"]+)":.*?Problem with given class_path \'([^\']+)\':\s*'
                           r"Option '([^']+)' is not accepted", re.DOTALL)
_NESTED = re.compile(r"""^NestedArg\(key='([^']+)', val='(.*)'\)$""")
_DENIED = re.compile(r"Importing '([^']+)' is not allowed, denied by the '([^']+)' entry")
_CHOICES = re.compile(r"Expected a (typing\.Literal\[[^\]]*\]|Literal\[[^\]]*\])")


def known_keys(parser: ArgumentParser, prefix: str = "") -> list[str]:
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
    return _readable(", ".join(dict.fromkeys(choices + ["null" if f == "NoneType" else f for f in found])))


def _readable(text: str) -> str:
    """jsonargparse's words for what a ``type`` argument accepts ("Expected a dot import path string") as a reader's."""
    return re.sub(r"\bdot\b", "a class named by its import path (a string such as torch.nn.ReLU, not a class_path "
                  "dict)", text)


_INNER_SUMMARY = re.compile(r"^\s+- Problem with given class_path '[^']*':\n\s+([\w.]+): (value .*)$", re.MULTILINE)
_UNTYPED = re.compile(r"(class_path '[^']*' is given for an argument without a type annotation[^\n]*)")
_PARSER_KEY = re.compile(r'Parser key "([^"]+)"')
#: a class_path whose argument is a list of classes that need the optimizer (``SequentialLR``'s ``schedulers``)
_NEEDS_OPTIMIZER = re.compile(r"- Problem with given class_path '([^']*)':\n(?:.*\n)*?\s*Parser key \"(\w+)\":\n"
                              r"\s*Problem with given class_path '([^']*)':\n\s*the following arguments are "
                              r"required: optimizer")
_AMBIGUOUS = re.compile(r"Multiple subclasses with name (\w+)\. Give the full class path to avoid ambiguity: "
                        r"([\w., ]+?)\.?$", re.MULTILINE)


def explain(parser: ArgumentParser, message: str) -> str:
    """``message`` (a jsonargparse error) with a summary line: the unknown key and the close known one, or the
    key, the given value and the accepted types."""
    for pattern in _UNKNOWN:
        match = pattern.search(message)
        if match:
            key = match.group(1).lstrip("-")
            close = close_key(key, known_keys(parser))
            hint = f" Did you mean {close!r}?" if close else ""
            return f"unknown key {key!r}.{hint} (`--help` lists every key)\n{message}"
    untyped = ([None] + list(_UNTYPED.finditer(message)))[-1]  # the last: inner parsers add summary lines too
    if untyped:  # accelkit's refusal (class_path_safety.UntypedClassPath), under the keys that lead to it
        keys = _PARSER_KEY.findall(message[:untyped.start()])
        key = ".init_args.".join(keys) if len(keys) > 1 and "Problem with given class_path" in message else \
            ".".join(keys[-1:])
        return f"{key}: {untyped.group(1)}\n{message}"
    denied, match = _DENIED.search(message), _BAD_VALUE.search(message)
    ambiguous = _AMBIGUOUS.search(message)
    if ambiguous and match:  # a short class name that several imported classes have (as Lightning refuses it)
        return (f"{match.group(1)}: the class name {ambiguous.group(1)!r} names {ambiguous.group(2)}; give the full "
                f"class path of the one meant\n{message}")
    if denied:  # jsonargparse's import path policy (class_path_safety turns it on), under whichever member
        key = f"{match.group(1)}: " if match else ""
        return (f"{key}class_path {denied.group(1)!r} is refused: jsonargparse denies "
                f"importing {denied.group(2)!r} from a configuration (it can run commands or code); name a class "
                f"there\n{message}")
    needs_optimizer = _NEEDS_OPTIMIZER.search(message)
    if needs_optimizer and match:  # SequentialLR, ChainedScheduler: refused by Lightning's CLI too
        outer, argument, inner = needs_optimizer.groups()
        return (f"{match.group(1)}: {outer} takes other schedulers ({argument}: {inner}), which a configuration "
                f"cannot build: each needs the optimizer, and only the scheduler under lr_scheduler is given it (as "
                f"in Lightning's LightningCLI); build {outer.rpartition('.')[2]} in the Module's "
                f"configure_optimizers instead\n{message}")
    if match and not _GIVEN.search(message):  # no value to name (a file that does not exist...): what it says
        reason = message[match.end():].strip().splitlines()
        return f"{match.group(1)}: {reason[0] if reason else 'not accepted'}\n{message}"
    inner = _INNER_SUMMARY.search(message) if match and "Problem with given class_path" in message else None
    if inner and match:  # an argument of the class a class_path names: its own summary line, under its full key
        return f"{match.group(1)}.init_args.{inner.group(1)}: {_readable(inner.group(2))}\n{message}"
    if match:
        given = _GIVEN.search(message)
        key, value = match.group(1), given.group(1).strip() if given else "?"
        nested = _NESTED.match(value)  # a --model.hidden abc: jsonargparse shows the group and its NestedArg
        accepted = _accepted(message)
        if nested:
            key, value = f"{key}.{nested.group(1)}", nested.group(2)
            pieces = message.split(f'Parser key "{nested.group(1)}":', 1)
            accepted = _accepted(pieces[1].split("\n    - ", 1)[0]) if len(pieces) == 2 else ""
        return (f"{key}: value {value!r} is not accepted"
                + (f"; accepted: {accepted}" if accepted else "") + f"\n{message}")
    return message


def _under_a_leaf(key: str, known: set[str]) -> bool:
    """Whether ``key`` is a part of a known key that takes a whole mapping (``trainer.max_time.hours``)."""
    parts = key.split(".")
    prefixes = {".".join(parts[:cut]) for cut in range(1, len(parts))}
    return any(p in known and not any(k.startswith(f"{p}.") for k in known) for p in prefixes)


def _init_names(class_path: str) -> list[str] | None:
    """The constructor's argument names of the class ``class_path`` names; ``None`` when it does not import or
    takes ``**kwargs`` (any key may then be right)."""
    from accelkit.cli.saved_config import import_class_path

    try:
        # a class path names a class (where it names something else, the error is reported elsewhere)
        parameters = inspect.signature(cast("type[object]", import_class_path(class_path)).__init__).parameters
    except Exception:  # noqa: BLE001 - a short name or a typo: jsonargparse reports the class itself
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    return [name for name in parameters if name != "self"]


def _chosen_class(group: str, words: list[str]) -> str | None:
    """The class path given to ``--group`` among ``words`` (the last one), or ``None``."""
    chosen = None
    for index, word in enumerate(words):
        if word.startswith(f"--{group}="):
            chosen = word.split("=", 1)[1]
        elif word == f"--{group}" and index + 1 < len(words):
            chosen = words[index + 1]
    return chosen if chosen and not chosen.lstrip().startswith(("{", "[")) else None


def _unknown_in_class(key: str, known: set[str], words: list[str]) -> tuple[bool, list[str]]:
    """Whether ``key`` lies under a group chosen by class path (``model.hidden``), and if so whether it is unknown
    there: ``(False, [])`` for no such group or a class that cannot be judged, ``(True, candidates)`` otherwise."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        group = ".".join(parts[:cut])
        if f"{group}.help" not in known:
            continue
        chosen = _chosen_class(group, words)
        names = _init_names(chosen) if chosen else None
        rest = [p for p in parts[cut:] if p != "init_args"]
        if names is None or not rest or rest[0] in ("class_path", "init_args", "dict_kwargs", "help") \
                or rest[0] in names:
            return False, []
        return True, [f"{group}.{name}" for name in names]
    return False, []


def _flatten(value: dict, prefix: str = "") -> list[str]:
    """A loaded configuration as the command-line words that would say the same (``--model models.Net``,
    ``--model.hidden=3``), for checking its keys as words are checked; lists are left out."""
    words: list[str] = []
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict) and "class_path" in item:
            words += [f"--{name}", str(item["class_path"])]
            item = item.get("init_args") or {}
        if isinstance(item, dict) and item:
            words += _flatten(item, f"{name}.")
        else:
            words.append(f"--{name}=")
    return words


def config_file_words(words: list[str]) -> list[str]:
    """The keys of the ``--config``/``-c`` files among ``words`` as command-line words (see :func:`_flatten`);
    a file that does not read as a YAML mapping adds nothing (the parser reports it)."""
    import yaml

    from accelkit.utilities.bounded import DataBombError, load_yaml

    found: list[str] = []
    for index, word in enumerate(words[:-1]):
        if word in ("--config", "-c"):
            try:
                with open(words[index + 1], encoding="utf-8") as handle:
                    loaded = load_yaml(handle.read(), words[index + 1])
            except (OSError, yaml.YAMLError, DataBombError):
                continue
            if isinstance(loaded, dict):
                found += _flatten(loaded)
    return found


def unknown_keys(parser: ArgumentParser, words: list[str], message: str = "") -> list[str]:
    """One line per key that ``parser`` does not take, among the options of ``words`` and the one ``message`` (a
    jsonargparse error) names, each with the closest known key: every unknown key at once, those of the model and
    data classes (checked against the constructor of the class the words choose) and the keys of the ``--config``
    files among the words included."""
    known = set(known_keys(parser))
    found: dict[str, list[str]] = {}
    words = [*config_file_words(words), *words]
    for word in words:
        if not word.startswith("--") or word == "--":
            continue
        key = word[2:].split("=", 1)[0].rstrip("+")
        if key in known or _under_a_leaf(key, known):
            continue
        in_class, candidates = _unknown_in_class(key, known, words)
        if in_class or not any(key.startswith(f"{k}.") and f"{k}.help" in known for k in known):
            found.setdefault(key, candidates or sorted(known))
    match = _CLASS_OPTION.search(message)
    if match:
        group, class_path, option = match.groups()
        names = _init_names(class_path) or []
        found.setdefault(f"{group}.{option}", [f"{group}.{name}" for name in names])
    for pattern in _UNKNOWN:
        match = pattern.search(message)
        if match:
            found.setdefault(match.group(1).lstrip("-"), sorted(known))
    lines = []
    for key, candidates in found.items():
        close = close_key(key, [k for k in candidates if not key.startswith(f"{k}.")])  # not its own group
        lines.append(f"unknown key {key!r}." + (f" Did you mean {close!r}?" if close else ""))
    return lines


def error_lines(parser: ArgumentParser, message: str, words: list[str]) -> list[str]:
    """What a parse error shows: every unknown key with its closest known one, else the one-line summary of
    :func:`explain` (the key, the given value, what is accepted), else jsonargparse's ``message`` itself."""
    unknown = unknown_keys(parser, words, message)
    if unknown:
        return unknown
    explained = explain(parser, message)
    return [explained.split("\n", 1)[0]] if explained != message else [message]
