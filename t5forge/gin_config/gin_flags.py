"""T5X-style gin flags: `--gin_file` (repeatable), `--gin.NAME=VALUE`, `--gin_search_paths`,
and T5X's `--gin_bindings='NAME = VALUE'` (repeatable).

What we add over T5X: plain string values need no inner quotes (`--gin.MODEL_DIR=/tmp/m`;
the T5X form `--gin.MODEL_DIR="'/tmp/m'"` still works), gin files are also searched in the
package's own `configs/`, and a typo in a binding or file name is one line with the
closest valid name instead of a parser traceback. T5X's own gin files (dynamic registration,
`from t5x import utils`, ...) parse too: see t5forge.gin_config.t5x_compat.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

import gin

from t5forge import storage
from t5forge.errors import ConfigError, T5ForgeError
from t5forge.gin_config import gin_internals, gin_syntax
from t5forge.interop.gin_model_config import quiet_include_search

PACKAGE_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@dataclass
class GinFlags:
    """The gin-related part of a command line, plus everything else left unparsed."""

    files: list[str] = field(default_factory=list)
    bindings: list[str] = field(default_factory=list)
    search_paths: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)


def split_gin_flags(argv: list[str]) -> GinFlags:
    """Pulls gin flags out of argv; accepts both `--flag=value` and `--flag value`."""
    flags = GinFlags()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        takes_value = name in ("--gin_file", "--gin_bindings", "--gin_search_paths") or (
            name.startswith("--gin.")
        )
        if takes_value and not eq:
            if i + 1 >= len(argv):
                raise ConfigError(f"{name} needs a value, e.g. {name}=...")
            value = argv[i + 1]
            i += 1
        if name == "--gin_file":
            flags.files.append(value)
        elif name == "--gin_search_paths":
            flags.search_paths.extend(p for p in value.split(",") if p)
        elif name == "--gin_bindings":  # T5X's absl flag: a gin statement as written
            flags.bindings.append(value)
        elif name.startswith("--gin."):
            flags.bindings.append(f"{name[len('--gin.') :]} = {gin_value(value)}")
        else:
            flags.rest.append(arg)
        i += 1
    return flags


_GIN_EXPRESSION = re.compile(r"^\s*[@%]|^\s*[\[\(\{]")


def gin_value(text: str) -> str:
    """Returns `text` as gin syntax, quoting it when it is a bare string."""
    if _GIN_EXPRESSION.match(text):
        return text
    try:
        ast.literal_eval(text)
        return text
    except (ValueError, SyntaxError):
        return repr(text)


def _read_url(url: str):
    with storage.reported(url):
        return storage.path(url).open("r")


def _url_exists(url: str) -> bool:
    if not storage.is_url(url):
        return False
    with storage.reported(url):
        return storage.path(url).is_file()


# `--gin_file=gs://...`, and `include` of files under a `--gin_search_paths` bucket.
gin_internals.add_file_reader(_read_url, _url_exists)


def resolve_gin_file(name: str, search_paths: list[str]) -> str | Path:
    """Finds a gin file as given, in the search paths, or in the package's configs/."""
    if storage.is_url(name):
        if _url_exists(name):
            return name
        raise ConfigError(f"gin file {name!r} not found; check the URL")
    urls = [f"{p.rstrip('/')}/{name}" for p in search_paths if storage.is_url(p)]
    for url in urls:
        if _url_exists(url):
            return url
    local_paths = [p for p in search_paths if not storage.is_url(p)]
    candidates = [Path(name)]
    candidates += [Path(p) / name for p in local_paths]
    relative = name.removeprefix("t5forge/configs/").removeprefix("configs/")
    candidates += [PACKAGE_CONFIGS / relative]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = [str(p.relative_to(PACKAGE_CONFIGS)) for p in PACKAGE_CONFIGS.rglob("*.gin")]
    close = difflib.get_close_matches(relative, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    searched = ", ".join(
        str(p) for p in ([Path(".")] + [Path(p) for p in local_paths] + urls + [PACKAGE_CONFIGS])
    )
    raise ConfigError(f"gin file {name!r} not found (searched {searched}){hint}")


def _configurable_names() -> list[str]:
    """The names a binding may write; T5X's names as T5X spells them (`__main__.train`, not
    the registry's `__main__.t5x_train`, which keeps `train` naming t5forge's)."""
    selectors = gin.config._REGISTRY._selector_map.keys()
    return sorted(
        {
            name.replace(".t5x_", ".")
            for selector in selectors
            for name in (selector, selector.rsplit(".", 1)[-1])
        }
    )


def _unknown_configurable_hint(selector: str) -> str:
    """What to write instead: the spellings the gin files' imports allow for the name after
    a module name they do not bind (`train_script.train` without T5X's run file is `train`;
    `__main__.train` is `train_script.train` or `train` after `import __main__ as
    train_script`), else the closest registered names."""
    head, _, rest = selector.partition(".")
    aliases = gin_internals.import_aliases()
    if rest and head not in aliases:
        spellings = [
            f"{alias}.{rest}"
            for alias, module in aliases.items()
            if module == head and _through_imports(f"{alias}.{rest}")
        ]
        try:
            if gin.config._REGISTRY.get_match(rest) is not None:
                spellings.append(rest)
        except KeyError:  # ambiguous: several configurables end with `rest`
            pass
        if spellings:
            return f"; the gin files' imports bind no name `{head}`: write {' or '.join(spellings)}"
    if rest and head in aliases:  # `train_script.trian`: the module's names, through the alias
        close = difflib.get_close_matches(rest, _configurable_names(), n=3)
        close = [f"{head}.{name}" for name in close]
    else:
        close = difflib.get_close_matches(selector, _configurable_names(), n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _through_imports(selector: str) -> list:
    """The configurables a selector names through the parsed files' imports (after the
    parse, so T5X's module names are put back for the look-up)."""
    from t5forge.gin_config import t5x_compat

    with t5x_compat.t5x_module_names():
        return gin_internals.through_imports(selector)


def _parameters_of(configurable: str) -> list[str]:
    try:
        fn = gin.config._REGISTRY.get_match(configurable).wrapped
    except (AttributeError, KeyError, ValueError):
        matches = _through_imports(configurable)  # `train_script.train`
        if len(matches) != 1:
            return []
        fn = matches[0].wrapped
    import inspect

    target = fn.__init__ if inspect.isclass(fn) else fn
    try:
        return [p for p in inspect.signature(target).parameters if p != "self"]
    except (TypeError, ValueError):
        return []


_T5X_SUPPORTED = (
    "docs/t5x-migration.md lists the T5X names t5forge understands and docs/t5x-gin-files.md "
    "what each of T5X's gin files does"
)
_FLAXFORMER_SUPPORTED = (
    "docs/flaxformer-gin.md lists the Flaxformer names t5forge understands and what each of "
    "Flaxformer's gin files does"
)


def _supported(name: str) -> str:
    return _FLAXFORMER_SUPPORTED if name.startswith("flaxformer") else _T5X_SUPPORTED


def _explain_unknown_t5x_name(message: str, where: str) -> ConfigError | None:
    """A T5X module or configurable t5forge has no stand-in for, with the file and line."""
    from t5forge.gin_config.t5x_compat.names import UNAVAILABLE_MODULES

    module = re.match(
        r"No module named '((?:t5x|seqio|t5|mesh_tensorflow|flaxformer|flax\.optim)(?:\.[\w.]+)?)'",
        message,
    )
    if module:
        name = module.group(1)
        reason = next(
            (why for prefix, why in UNAVAILABLE_MODULES.items() if f"{name}.".startswith(prefix)),
            _supported(name),
        )
        library = {"flaxformer": "Flaxformer", "flax": "Flax"}.get(name.split(".")[0], "T5X")
        return ConfigError(f"{where}{library} module {name} is not available in t5forge: {reason}")
    attribute = re.match(
        r"Couldn't resolve selector \S+; <module '((?:t5x|seqio|t5|flaxformer)\b[\w.]*)'[^>]*> "
        r"has no attribute (\w+)",
        message,
    )
    if attribute:
        return ConfigError(
            f"{where}{attribute.group(1)}.{attribute.group(2)} is not supported "
            f"by t5forge; {_supported(attribute.group(1))}"
        )
    return None


def explain_gin_error(error: Exception) -> ConfigError:
    """Turns gin's multi-line parse/binding errors into one line with a suggestion."""
    if isinstance(error, ConfigError):
        return error
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    where = ""
    for line in str(error).splitlines()[1:]:
        if line.strip().startswith("In ") or line.strip().startswith("Failed"):
            continue
        if line.strip():
            where = line.strip()
            break
    place = re.search(r'In file "([^"]+)", line (\d+)', str(error))
    at = f"{place.group(1)}:{place.group(2)}: " if place else ""
    if isinstance(error, T5ForgeError):  # t5forge refused what an imported task module did
        return ConfigError(f"{at}{message}")
    t5x_unknown = _explain_unknown_t5x_name(message, at)
    if t5x_unknown:
        return t5x_unknown
    missing = re.match(r"No module named '([\w.]+)'", message)
    if missing:
        return ConfigError(
            f"{at}the gin file imports {missing.group(1)}, which is not importable here; put "
            "the folder holding it on PYTHONPATH, or register its tasks with --module_import"
        )
    not_imported = re.match(r"'(\w+)' was not provided by an import statement", message)
    if not_imported:
        name = not_imported.group(1)
        module = gin_internals.import_aliases().get(name)
        add = f"`import {module} as {name}`" if module else f"the import that binds `{name}`"
        return ConfigError(
            f"{at}`{where}`: '{name}' was not provided by an import statement (this file "
            f"names configurables through its own imports: from __gin__ import "
            f"dynamic_registration); add {add} to it"
        )
    macro = re.search(r"No bindings specified for '([^'/]+)/gin.macro'", message)
    if macro:
        name = macro.group(1)
        return ConfigError(
            f"macro {name} is not set; pass --gin.{name}=... or bind it in a gin file"
        )
    required = re.search(r"(\w+)/macro\.value set to `%gin\.REQUIRED`", message)
    if required:
        name = required.group(1)
        return ConfigError(
            f"{name} is required by the gin files (%gin.REQUIRED); pass --gin.{name}=..."
        )
    unknown = re.search(r"No configurable matching '([^']+)'", message)
    if unknown:
        hint = _unknown_configurable_hint(unknown.group(1))
        return ConfigError(f"{at}unknown gin configurable {unknown.group(1)!r} in `{where}`{hint}")
    bad_param = re.search(
        r"Configurable '([^']+)' doesn't have a parameter named '([^']+)'", message
    )
    if bad_param:
        configurable, param = bad_param.groups()
        close = difflib.get_close_matches(param, _parameters_of(configurable), n=3)
        hint = f"; did you mean {configurable}.{close[0]}?" if close else ""
        return ConfigError(f"{at}{configurable} has no parameter {param!r} (in `{where}`){hint}")
    return ConfigError(f"{at}bad gin config: {message}" + (f" (in `{where}`)" if where else ""))


# What gin raises for a bad config; ConfigError (a ValueError) passes through as it is.
_GIN_ERRORS = (
    ValueError,
    SyntaxError,
    TypeError,
    FileNotFoundError,
    ImportError,
    AttributeError,
    NameError,
)


def parse_gin(flags: GinFlags, extra_bindings: list[str] | None = None, finalize: bool = True):
    """Parses the files then the bindings (command line wins), as T5X does; T5X's own files
    are translated onto t5forge's names before the config is finalized."""
    from t5forge.gin_config import t5x_compat

    for path in flags.search_paths:
        gin.add_config_file_search_path(path)
    gin.add_config_file_search_path(str(PACKAGE_CONFIGS))
    gin.add_config_file_search_path(str(PACKAGE_CONFIGS.parent.parent))
    files = [str(resolve_gin_file(f, flags.search_paths)) for f in flags.files]
    bindings = list(extra_bindings or []) + flags.bindings
    try:
        with (
            quiet_include_search(),
            t5x_compat.t5x_module_names(),
            gin_internals.extra_parameters(t5x_compat.shadowed_parameters()),
            gin_internals.module_aliases(),
            gin_internals.RecordFilesRead() as files_read,
        ):
            try:
                gin.parse_config_files_and_bindings(files, bindings, finalize_config=False)
            except RecursionError:
                raise _include_loop(files_read) from None
            except OSError as error:
                not_found = _include_not_found(error, files_read, flags.search_paths)
                if not_found is None:
                    raise
                raise not_found from None
            except UnicodeDecodeError:
                gin_syntax.read_text(files_read[-1])  # raises the one line naming the file
                raise
        t5x_compat.translate(files_read, bindings)
        if finalize:
            gin.finalize()
    except Exception as e:
        from t5forge.run.task_modules import explain_import_failure

        in_a_module = explain_import_failure(e)  # a task module the gin files import failed
        if in_a_module is not None:
            raise in_a_module from None
        if isinstance(e, _GIN_ERRORS):
            raise explain_gin_error(e) from None
        raise


def _include_not_found(error: OSError, files_read: list[str], search_paths: list[str]):
    """gin's OSError for an `include` it finds nowhere, as the including file and line."""
    missing = re.match(r"Unable to open file: (.+?)\. Searched config paths", str(error))
    if not missing:
        return None
    for includer in reversed(files_read):
        for number, line in enumerate(gin_syntax.read_text(includer).splitlines(), 1):
            if line.lstrip().startswith("include") and missing.group(1) in line:
                return ConfigError(
                    f"{includer}:{number}: `{line.strip()}`: file not found (--gin_search_paths: "
                    f"{', '.join(search_paths) or 'none'}); add the folder it is relative to "
                    "with --gin_search_paths=DIR"
                )
    return None


def _include_loop(files_read: list[str]) -> ConfigError:
    """gin follows `include` without a check for loops until Python's recursion limit; the
    files read name the loop: from the first file read twice up to its second reading."""
    seen: dict[str, int] = {}
    for index, path in enumerate(files_read):
        if path in seen:
            loop = files_read[seen[path] : index + 1]
            break
        seen[path] = index
    else:
        return ConfigError("gin files nest too deeply; include fewer levels of gin files")
    if len(loop) == 2:
        return ConfigError(f"{loop[0]} includes itself; remove that `include` line")
    return ConfigError(
        f"{loop[0]}: gin files include each other in a loop ({' -> '.join(loop)}); "
        "remove one of those `include` lines"
    )
