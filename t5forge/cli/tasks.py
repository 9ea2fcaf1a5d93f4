"""`t5forge tasks list | show NAME | preview NAME`: see what a task feeds the model.

Debugging a data pipeline starts with looking at it: `preview` runs the real pipeline and
prints processed examples decoded back to text (sentinels included), so a wrong prefix,
a missing EOS or a bad vocabulary shows up before any training step.
"""

from __future__ import annotations

import argparse
import itertools
import os

import numpy as np

from t5forge.cli.commands import COMMANDS
from t5forge.errors import DataError
from t5forge.run.task_modules import import_task_modules

HELP = COMMANDS["tasks"].summary


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--module_import",
        action="append",
        default=[],
        help="module that registers more tasks (repeatable)",
    )
    common.add_argument(
        "--vocab", help="SentencePiece model for built-in tasks (default: $T5FORGE_VOCAB)"
    )
    parser = argparse.ArgumentParser(prog="t5forge tasks", description=HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", parents=[common], help="names of all registered tasks and mixtures")
    show = commands.add_parser(
        "show", parents=[common], help="source, splits, steps and features of one task"
    )
    show.add_argument("name")
    preview = commands.add_parser(
        "preview", parents=[common], help="first processed examples, decoded"
    )
    preview.add_argument("name")
    preview.add_argument("--split", default="validation")
    preview.add_argument("-n", "--num_examples", type=int, default=3)
    preview.add_argument(
        "--sequence_length",
        default="inputs=512,targets=114",
        help="feature lengths, e.g. inputs=512,targets=114",
    )
    preview.add_argument("--seed", type=int, default=0)
    preview.add_argument("--shuffle", action="store_true", help="shuffle before taking examples")
    return parser


def _parse_lengths(text: str) -> dict[str, int]:
    lengths = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if not value.strip().isdigit():
            raise DataError(
                f"--sequence_length {text!r}: write name=length pairs, e.g. inputs=512,targets=114"
            )
        lengths[name.strip()] = int(value)
    return lengths


def _list() -> None:
    from t5forge.data.providers.mixture import MixtureRegistry, TaskRegistry

    for name in TaskRegistry.names():
        task = TaskRegistry.get(name)
        try:
            splits = ", ".join(task.splits)
        except DataError:  # a TFDS dataset not prepared yet: `tasks show` says where
            splits = "(data not found)"
        print(f"task     {name:<36} splits: {splits}")
    for name in MixtureRegistry.names():
        mixture = MixtureRegistry.get(name)
        print(f"mixture  {name:<36} tasks: {', '.join(t.name for t in mixture.tasks)}")


def _show(name: str) -> None:
    from t5forge.data.providers.mixture import Mixture, get_mixture_or_task

    item = get_mixture_or_task(name)
    if isinstance(item, Mixture):
        print(f"mixture {item.name}")
        for task in item.tasks:
            print(f"  {task.name:<36} rate {item.get_rate(task):g}")
        return
    print(f"task {item.name}")
    print(f"  source: {item.source!r}")
    for split in item.splits:
        try:
            size = item.num_input_examples(split)
        except DataError as e:
            size = f"unavailable ({e})"
        print(f"  split {split}: {size} examples")
    print("  preprocessors:")
    for step in item.preprocessors:
        print(f"    {step!r}")
    print("  output features:")
    for feature_name, feature in item.output_features.items():
        print(
            f"    {feature_name}: {feature.vocabulary!r}, add_eos={feature.add_eos}, "
            f"required={feature.required}"
        )
    metric_names = [
        getattr(m, "__name__", getattr(getattr(m, "func", m), "__name__", repr(m)))
        for m in item.metric_fns
    ]
    print(f"  metrics: {', '.join(metric_names) or 'none'}")


def _preview(args) -> None:
    from t5forge.data.providers.mixture import get_mixture_or_task

    item = get_mixture_or_task(args.name)
    features = item.output_features
    ds = item.get_dataset(
        args.split,
        sequence_length=_parse_lengths(args.sequence_length),
        shuffle=args.shuffle,
        seed=args.seed,
    )
    shown = 0
    for index, example in enumerate(itertools.islice(ds, args.num_examples)):
        print(f"--- example {index}")
        for key, value in example.items():
            if key in features:
                ids = np.asarray(value).tolist()
                text = features[key].vocabulary.decode(ids)
                print(f"  {key} ({len(ids)} tokens): {text}")
            elif not key.endswith("_pretokenized"):
                print(f"  {key}: {np.asarray(value).tolist()}")
        shown += 1
    if shown == 0:
        print(f"(no examples in split {args.split!r})")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.vocab:
        os.environ["T5FORGE_VOCAB"] = args.vocab
    import_task_modules(args.module_import)
    if args.command == "list":
        _list()
    elif args.command == "show":
        _show(args.name)
    else:
        _preview(args)
    return 0
