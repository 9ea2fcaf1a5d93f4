"""Every place t5forge reaches into gin's private state, kept in one file and explained.

gin-config 0.5 has no public API for the four things below; each is a few lines over a
private name, so a gin upgrade that moves them breaks here, nowhere else.

1. The file readers' existence check (`gin.config._FILE_READERS`; readers added later, such
   as the object-storage one, get the same wrappers through `add_file_reader`). gin also looks
   `include 'runs/x.gin'` up as a Python package resource and crashes with a TypeError when a
   plain `runs/` folder (a namespace package, e.g. a model dir) is in the working directory;
   such a lookup should just mean "not here".
2. Which files a parse read, in order (the same readers): T5X compatibility names the file
   and line of every binding it cannot honour, and the run's binding checks where each
   binding was written (`files_read_by_last_parse`).
3. Every scope's bindings of one configurable (`gin.config._CONFIG`), and dropping them:
   T5X compatibility rewrites a T5X configurable's bindings onto t5forge's after parsing.
4. The import statements gin remembers (`gin.config._IMPORTS`): T5X's module names exist
   only while gin parses, so they are forgotten afterwards; otherwise `gin.config_str()`
   would import them again to write config.gin.
5. A second, exact name in the registry (`gin.config._REGISTRY`): once T5X's
   `network.T5Config` is registered beside t5forge's T5Config, the partial selector
   `T5Config` that every t5forge gin file writes would be ambiguous; an exact `T5Config`
   entry for t5forge's keeps it unique (gin prefers an exact match). config.gin then
   names it `configs.T5Config`, which parses back to the same configurable.
7. Which module a configurable named in gin's "In call to configurable 'NAME'" comes from
   (`gin.config._REGISTRY`): an error raised inside another library's function a gin file
   configures (optax's schedules) is a configuration error, one inside t5forge's is not.
6. Parameters gin checks at parse time (`gin.config._might_have_parameter`): T5X's files
   without imports bind T5X's parameters under a name that is t5forge's
   (`utils.SaveCheckpointConfig.dtype`); while T5X files parse, t5forge's configurable
   accepts its T5X namesake's parameters too, which translation then takes over.
8. Module aliases outside the file that declares them (`gin.config.ParseContext` and
   `gin.config._IMPORTS`): real gin registers a function reached as `train_script.train`
   after `import __main__ as train_script` under that spelling, so `--gin.train_script.train.
   eval_period=4`, `--gin_bindings` and files without dynamic registration may write it.
   T5X's names are registered before any file is parsed (under `__main__.t5x_train`), so the
   spelling is looked up here instead: through the import statements gin has seen, when
   nothing in the registry matches; gin's refusals stay (an alias no file declares,
   `__main__.train` after `import __main__ as train_script`, an attribute the module lacks).
"""

from __future__ import annotations

import contextlib
import sys

import gin
import gin.config

_files_read: list[str] | None = None
_last_files_read: list[str] = []


def _tolerant(existence_check):
    def check(path):
        try:
            return existence_check(path)
        except (TypeError, ValueError, ImportError):
            return False

    return check


# gin follows `include` without looking for loops, to Python's recursion limit (seconds of
# parsing); a file read this often in one parse is in a loop, which parse_gin names.
_READS_IN_A_LOOP = 32


def _recording(reader):
    def read(path):
        if _files_read is not None:
            _files_read.append(str(path))
            if _files_read.count(str(path)) > _READS_IN_A_LOOP:
                raise RecursionError(f"{path} is included in a loop")
        return reader(path)

    return read


gin.config._FILE_READERS[:] = [
    (_recording(reader), _tolerant(check)) for reader, check in gin.config._FILE_READERS
]


def add_file_reader(reader, existence_check) -> None:
    """Registers a reader (gin's public hook), recorded and tolerant like the built-in ones."""
    gin.config.register_file_reader(_recording(reader), _tolerant(existence_check))


class RecordFilesRead:
    """`with RecordFilesRead() as files:` lists the gin files parsed inside, includes too."""

    def __enter__(self) -> list[str]:
        global _files_read, _last_files_read
        _files_read = _last_files_read = []
        return _files_read

    def __exit__(self, *exc) -> None:
        global _files_read
        _files_read = None


def files_read_by_last_parse() -> list[str]:
    """The files the last `RecordFilesRead` block read, in order (so far, if it failed)."""
    return list(_last_files_read)


def bindings_of(selector: str) -> dict[str, dict]:
    """{scope: {parameter: raw value}} bound to the configurable with this complete selector."""
    return {
        scope: dict(params)
        for (scope, complete), params in gin.config._CONFIG.items()
        if complete == selector
    }


def all_bindings() -> dict[tuple[str, str], dict]:
    """{(scope, complete selector): {parameter: raw value}}, macros included."""
    return {key: dict(params) for key, params in gin.config._CONFIG.items()}


def forget_imports(is_forgotten) -> None:
    """Drops remembered import statements whose module `is_forgotten(name)`; drops the
    dynamic-registration marker too when no other import is left."""
    imports = gin.config._IMPORTS
    for statement in [s for s in imports if is_forgotten(s.module)]:
        imports.discard(statement)
    if all(s.module.startswith("__gin__.") for s in imports):
        imports.clear()


def complete_selector(partial: str) -> str:
    """The registered complete selector a partial one (`utils.DatasetConfig`) names."""
    return gin.config._REGISTRY.get_match(partial).selector


def registered_object(partial: str):
    """The function or class registered under a selector, as given to gin (unwrapped)."""
    return gin.config._REGISTRY.get_match(partial).wrapped


def unbind(scope: str, selector: str, param: str) -> None:
    """Forgets one binding (complete selector); the configurable's other bindings stay."""
    params = gin.config._CONFIG.get((scope, selector))
    if params is not None:
        params.pop(param, None)
        if not params:
            del gin.config._CONFIG[(scope, selector)]


def imports() -> list:
    """The import statements gin remembers from dynamic-registration files."""
    return list(gin.config._IMPORTS)


def _spelled_out(value):
    if isinstance(value, gin.config.ConfigurableReference):
        if value.configurable.wrapped is gin.config.macro:
            return value
        scoped = "/".join([*value.scopes, value.configurable.selector])
        return gin.config.ConfigurableReference(scoped, value.evaluate)
    if isinstance(value, list | tuple):
        return type(value)(_spelled_out(v) for v in value)
    if isinstance(value, dict):
        return {k: _spelled_out(v) for k, v in value.items()}
    return value


def spell_out_references() -> None:
    """Rewrites every `@name` in the bindings with its complete selector, so that a reference
    written in a dynamic-registration file (`@network.T5Config()`, resolved through that
    file's imports) still means the same configurable in config.gin, where there are none."""
    for params in gin.config._CONFIG.values():
        for param, value in params.items():
            params[param] = _spelled_out(value)


def add_exact_name(name: str, complete: str) -> None:
    """Makes the partial selector `name` mean the configurable `complete` (see 5 above)."""
    if name not in gin.config._REGISTRY:
        gin.config._REGISTRY[name] = gin.config._REGISTRY[complete]


def selectors_ending_with(name: str) -> list[str]:
    """Complete selectors whose last component is `name`."""
    return [s for s in gin.config._REGISTRY.matching_selectors(name) if s.split(".")[-1] == name]


def short_name(selector: str) -> str:
    """The shortest selector naming a complete one unambiguously (`train`), for messages."""
    return gin.config._REGISTRY.minimal_selector(selector)


@contextlib.contextmanager
def extra_parameters(extra: dict[str, set[str]]):
    """Inside the block, the configurables named (partial selectors) also accept `extra`'s
    parameter names at parse time (see 6 above)."""
    accepted = {
        gin.config._REGISTRY.get_match(name).wrapper: params for name, params in extra.items()
    }
    original = gin.config._might_have_parameter

    def might_have(fn_or_cls, arg_name):
        return original(fn_or_cls, arg_name) or arg_name in accepted.get(fn_or_cls, ())

    gin.config._might_have_parameter = might_have
    try:
        yield
    finally:
        gin.config._might_have_parameter = original


def configurable_modules(name: str) -> set[str]:
    """The modules of the registered functions or classes called `name` (see 7 above)."""
    return {
        getattr(info.wrapped, "__module__", "") or ""
        for selector, info in gin.config._REGISTRY.items()
        if selector.rsplit(".", 1)[-1] == name
    }


def _imports_seen() -> set:
    """The import statements of the files gin has parsed, and of those still being parsed."""
    statements = set(gin.config._IMPORTS)
    for context in gin.config._PARSE_CONTEXTS:
        statements.update(context.imports)
    return {s for s in statements if not s.module.startswith("__gin__.")}


def _bound_module(statement):
    """What the import binds its name to: the module itself, or for `import a.b` the package a."""
    if statement.is_from or statement.alias:
        return sys.modules.get(statement.module)
    return sys.modules.get(statement.module.split(".")[0])


def _attribute(value, names: list[str]):
    for name in names:
        value = getattr(value, name, None)
    return value


def attributes_through(statement, selector: str) -> list[str] | None:
    """The attribute names `selector` reaches in what an import statement binds, when its
    leading components end with the import's name as gin registers it (`train_script`,
    `t5x.utils`, `utils`); None when the selector is not spelled through that import."""
    names = selector.split(".")
    path = statement.partial_path().split(".")
    for start in range(len(path)):
        spelled = path[start:]
        if names[: len(spelled)] == spelled and len(names) > len(spelled):
            return names[len(spelled) :]
    return None


def through_imports(selector: str) -> list:
    """The configurables `selector` names as spelled through the imports seen (see 8 above)."""
    found = []
    for statement in _imports_seen():
        attributes = attributes_through(statement, selector)
        if attributes is None:
            continue
        obj = _attribute(_bound_module(statement), attributes)
        configurable = gin.config._inverse_lookup(obj) if obj is not None else None
        if configurable is not None and configurable not in found:
            found.append(configurable)
    return found


def import_aliases() -> dict[str, str]:
    """{alias: module} of the `import M as A` statements gin has seen (for messages)."""
    return {s.alias: s.module for s in _imports_seen() if s.alias}


@contextlib.contextmanager
def module_aliases():
    """Inside the block, a selector nothing in gin's registry matches is looked up through
    the import statements gin has seen (see 8 above)."""
    original = gin.config.ParseContext.get_configurable

    def get_configurable(context, selector):
        found = original(context, selector)
        if found is not None or context._dynamic_registration:
            return found
        matches = through_imports(selector)
        if len(matches) > 1:
            names = sorted(m.selector for m in matches)
            raise ValueError(f"Ambiguous selector '{selector}', matches {names}.")
        return matches[0] if matches else None

    gin.config.ParseContext.get_configurable = get_configurable
    try:
        yield
    finally:
        gin.config.ParseContext.get_configurable = original
