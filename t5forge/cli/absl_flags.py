"""absl's and JAX's flags on a t5forge command line, taken the way T5X takes them.

T5X's and SeqIO's commands are absl programs, so their users' command lines carry absl's own
flags (--alsologtostderr, --logtostderr, --v/--verbosity, --log_dir, --stderrthreshold,
--logger_levels, --flagfile, --undefok) and JAX's --jax_* flags, which T5X hands to JAX through
absl. absl's own parser reads its flags here, so they mean what they mean under T5X; whatever
it does not know (each command's flags, gin's) goes on to the command, in order.

Logging: a command line with any of absl's logging flags gets T5X's log lines, absl's handler
at INFO unless --v says otherwise (with --log_dir, absl's log files too). Without them
t5forge's quieter default (warnings and progress bars) stays.
"""

from __future__ import annotations

import logging
from pathlib import Path

from t5forge.errors import ConfigError

# Printed by the command's own parser; absl's help flag would print absl's help and exit.
HELP_FLAGS = ("-h", "--help", "--helpfull", "--helpshort", "--helpxml")
LOGGING_FLAGS = (
    "logtostderr",
    "alsologtostderr",
    "verbosity",
    "log_dir",
    "stderrthreshold",
    "logger_levels",
    "showprefixforinfo",
)
_TRUE, _FALSE = ("true", "t", "1", "yes", "y"), ("false", "f", "0", "no", "n")


def take(argv: list[str]) -> list[str]:
    """Reads and applies absl's and JAX's flags in `argv` (expanding --flagfile); returns the
    rest in order, help flags last."""
    from absl import flags
    from absl import logging as absl_logging  # noqa: F401 - defines absl's logging flags

    helps = [arg for arg in argv if arg in HELP_FLAGS]
    values = flags.FLAGS
    values.unparse_flags()  # a second command in one process starts from the defaults
    try:
        rest = values(["t5forge", *(a for a in argv if a not in HELP_FLAGS)], known_only=True)[1:]
    except flags.Error as error:
        message = str(error).replace("ERROR:: ", "").splitlines()[0]
        if isinstance(error, flags.CantOpenFlagFileError):
            raise ConfigError(f"--flagfile: {message}; check the path") from None
        raise ConfigError(f"{message}; fix or drop that flag") from None
    if any(values[name].present for name in LOGGING_FLAGS):
        _log_as_absl(values)
    return _apply_jax_flags(rest) + helps


def _log_as_absl(values) -> None:
    from absl import logging as absl_logging

    root = logging.getLogger()
    for handler in list(root.handlers):  # a library's basicConfig: absl's handler replaces it
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    absl_logging.use_absl_handler()
    verbosity = values["verbosity"].value if values["verbosity"].present else 0
    root.setLevel(
        absl_logging.converter.absl_to_standard(verbosity)
        if verbosity <= 1
        else logging.DEBUG - (verbosity - 1)  # absl's vlog levels below DEBUG
    )
    if values["log_dir"].value:
        _start_log_files(values["log_dir"].value)


def _start_log_files(log_dir: str) -> None:
    """absl's log files in `log_dir` (t5forge.INFO links the newest), created if missing;
    with --logtostderr absl writes none, with --alsologtostderr stderr gets the lines too."""
    from absl import logging as absl_logging

    from t5forge import storage

    if storage.is_url(log_dir):
        raise ConfigError(f"--log_dir={log_dir}: absl writes log files to a local directory")
    try:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        absl_logging.get_absl_handler().use_absl_log_file("t5forge", log_dir)
    except OSError as error:
        raise ConfigError(f"--log_dir={log_dir}: cannot write log files there ({error})") from None


def _apply_jax_flags(argv: list[str]) -> list[str]:
    """`--jax_NAME=VALUE`, `--jax_NAME VALUE`, `--jax_NAME` and `--nojax_NAME`, as JAX's own
    absl flags take them; the other arguments are returned. (jax.config.config_with_absl
    would define those flags in absl's process-wide registry, which a second command in one
    process cannot do again, so each value is typed from jax.config.meta and set here.)"""
    rest, i = [], 0
    while i < len(argv):
        name, eq, text = argv[i].removeprefix("--").partition("=")
        negated = name.startswith("nojax_")
        if not argv[i].startswith("--") or not (name.startswith("jax_") or negated):
            rest.append(argv[i])
            i += 1
            continue
        option = name.removeprefix("no")
        import jax

        if option not in jax.config.meta:
            raise ConfigError(f"unknown JAX flag --{option}; JAX's flags are jax.config's names")
        kind = jax.config.meta[option][0]  # the type JAX's own absl flag is defined with
        if kind is bool or negated:
            value = _boolean(option, text) if eq else not negated
        else:
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError(f"--{option} needs a value, e.g. --{option}=...")
                text, i = argv[i + 1], i + 1
            value = _typed(option, text, kind, jax.config.meta[option][2])
        try:
            jax.config.update(option, value)
        except (ValueError, TypeError, AttributeError) as error:
            raise ConfigError(f"--{option}={text}: {str(error).splitlines()[0]}") from None
        i += 1
    return rest


def _boolean(name: str, text: str) -> bool:
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise ConfigError(f"--{name}={text}: a boolean flag takes true or false")


def _typed(name: str, text: str, kind, definition: dict):
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(f"--{name}={text}: expected {kind.__name__}") from None
    if kind == "enum_class":  # absl matches the member's name, in any case
        members = {member.name.lower(): member for member in definition["enum_class"]}
        if text.lower() not in members:
            raise ConfigError(f"--{name}={text}: expected one of {', '.join(members)}")
        return members[text.lower()]
    return text  # str, and enums, which jax.config.update checks


def absl_booleans(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """absl's spellings of a boolean flag (`--name=false`, `--noname`; the last one wins) as
    argparse's `store_true` takes them: `--name` once when the flag ends up true."""
    rest, final = [], {}
    for arg in argv:
        name, eq, text = arg.removeprefix("--").partition("=")
        if arg.startswith("--") and name in names:
            final[name] = _boolean(name, text) if eq else True
        elif arg.startswith("--no") and name[2:] in names and not eq:
            final[name[2:]] = False
        else:
            rest.append(arg)
    return rest + [f"--{name}" for name, value in final.items() if value]
