"""``accelkit fit path/to/file.py:Class``: train a Module named by its file, with the Trainer's options as flags."""

from __future__ import annotations

import argparse
from pathlib import Path

from accelkit.cli.commands import load_module_class, parse_value
from accelkit.trainer.summary import print_fit_summary


def add_file_fit_arguments(parser: argparse.ArgumentParser) -> None:
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


def run_file_fit(args: argparse.Namespace) -> int:
    import time

    import accelkit

    accelkit.seed_everything(args.seed)
    cls = load_module_class(args.target)
    init = {}
    for item in args.init:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"accelkit: --init {item!r} must be KEY=VALUE")
        init[key] = parse_value(value)
    try:
        model = cls(**init)
    except TypeError as exc:
        raise SystemExit(f"accelkit: {cls.__name__}({', '.join(f'{k}={v!r}' for k, v in init.items())}) failed: "
                         f"{exc}; check the --init names and values") from None
    if args.ckpt_path not in (None, "last") and not Path(args.ckpt_path).is_file():
        raise SystemExit(f"accelkit: --ckpt-path {args.ckpt_path!r} does not exist")
    trainer = accelkit.Trainer(
        accelerator=args.accelerator,
        devices=parse_value(args.devices) if args.devices != "auto" else "auto",
        strategy=args.strategy,
        precision=parse_value(args.precision) if args.precision.isdigit() else args.precision,
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
    if trainer.progress_bar_callback is None:  # with a bar, fit() printed the summary itself
        print_fit_summary(trainer, time.perf_counter() - start)
    has_test = type(model).test_step is not accelkit.Module.test_step
    if not args.no_test and has_test and model.test_dataloader() is not None:
        results = trainer.test(model)
        if trainer.is_global_zero:
            for name, value in sorted(results[0].items()):
                print(f"accelkit: held-out {name} = {value:.4f}")
    return 0
