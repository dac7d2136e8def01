"""The ``accelkit`` command.

    accelkit fit examples/digits.py:DigitsClassifier --devices 2 --strategy ddp_spawn
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

#: sub-command name -> (help, function adding arguments, function running it)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None]) -> Callable:
    """Register a sub-command (used by this module; plugins may add their own)."""

    def decorate(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help, arguments, run)
        return run

    return decorate


def load_module_class(target: str) -> type:
    """Import ``path/to/file.py:ClassName`` or ``package.module:ClassName``.

    A file is imported under its own stem with its folder put first on ``sys.path``, so worker processes
    started with the ``spawn`` method can import it again by name.
    """
    location, sep, class_name = target.rpartition(":")
    if not sep or not location or not class_name:
        raise SystemExit(f"accelkit: {target!r} is not of the form path/to/file.py:ClassName or package.module:Class")
    if location.endswith(".py") or "/" in location or "\\" in location:
        path = Path(location).resolve()
        if not path.is_file():
            raise SystemExit(f"accelkit: no such file: {location}")
        sys.path.insert(0, str(path.parent))
        module_name = path.stem
    else:
        module_name = location
    module = importlib.import_module(module_name)
    try:
        cls = getattr(module, class_name)
    except AttributeError:
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and hasattr(v, "training_step"))
        raise SystemExit(f"accelkit: {module_name} has no {class_name!r}; modules found there: {names}") from None
    return cls


def _parse_value(text: str) -> Any:
    """``"2"`` -> 2, ``"1.5"`` -> 1.5, ``"[0, 1]"`` -> [0, 1], anything else stays a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _fit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the Module to train: path/to/file.py:ClassName or package.module:ClassName")
    parser.add_argument("--accelerator", default="auto", help="accelerator name, or 'auto' (default)")
    parser.add_argument("--devices", default="auto", help="device count, indices ('0,1'), or 'auto' (default)")
    parser.add_argument("--strategy", default="auto", help="strategy name, or 'auto' (default)")
    parser.add_argument("--precision", default="32-true", help="precision name (default '32-true')")
    parser.add_argument("--num-nodes", type=int, default=1, help="number of nodes (default 1)")
    parser.add_argument("--plugins", action="append", default=None,
                        help="a strategy/precision name or 'no:NAME' to block a plugin; repeatable")
    parser.add_argument("--max-epochs", type=int, default=20, help="epochs to train (default 20)")
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (default: no limit)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--default-root-dir", default=None, help="where logs and checkpoints go (default: cwd)")
    parser.add_argument("--ckpt-path", default=None, help="resume from this checkpoint ('last' for the latest)")
    parser.add_argument("--no-progress-bar", action="store_true", help="do not show the progress bar")
    parser.add_argument("--no-test", action="store_true", help="skip the test run after training")
    parser.add_argument("--init", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument for the Module's constructor; repeatable")


@command("fit", "train a Module, then report its test metrics", _fit_arguments)
def _fit(args: argparse.Namespace) -> int:
    import time

    import accelkit

    accelkit.seed_everything(args.seed)
    cls = load_module_class(args.target)
    init = {}
    for item in args.init:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"accelkit: --init {item!r} must be KEY=VALUE")
        init[key] = _parse_value(value)
    model = cls(**init)
    trainer = accelkit.Trainer(
        accelerator=args.accelerator,
        devices=_parse_value(args.devices) if args.devices != "auto" else "auto",
        strategy=args.strategy,
        precision=_parse_value(args.precision) if args.precision.isdigit() else args.precision,
        num_nodes=args.num_nodes,
        plugins=args.plugins,
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        seed=args.seed,
        default_root_dir=args.default_root_dir,
        enable_progress_bar=not args.no_progress_bar,
    )
    config = trainer.config
    print(f"accelkit: training {cls.__name__} on {config.accelerator} devices={config.devices} "
          f"strategy={config.strategy} precision={config.precision} num_nodes={config.num_nodes}")
    start = time.perf_counter()
    trainer.fit(model, ckpt_path=args.ckpt_path)
    elapsed = time.perf_counter() - start
    if trainer.is_global_zero:
        shown = ", ".join(f"{k}={v:.4f}" for k, v in sorted(trainer.callback_metrics.items()))
        print(f"accelkit: fit finished in {elapsed:.1f} s after {trainer.current_epoch} epochs, "
              f"{trainer.global_step} steps; {shown}")
        if trainer.enable_checkpointing:
            print(f"accelkit: checkpoint {trainer.checkpoint_path}")
    has_test = type(model).test_step is not accelkit.Module.test_step
    if not args.no_test and has_test and model.test_dataloader() is not None:
        results = trainer.test(model)
        if trainer.is_global_zero:
            for name, value in sorted(results[0].items()):
                print(f"accelkit: held-out {name} = {value:.4f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``accelkit`` command."""
    from accelkit.__about__ import __version__

    parser = argparse.ArgumentParser(
        prog="accelkit",
        description="Train PyTorch modules on any accelerator a plugin provides.",
        epilog="Run 'accelkit COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"accelkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(sub_parser)
        sub_parser.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accelkit`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2
    from accelkit.errors import AccelkitError

    try:
        return int(args.run(args) or 0)
    except AccelkitError as exc:
        print(f"accelkit: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
