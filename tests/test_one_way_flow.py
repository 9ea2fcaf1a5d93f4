"""Data flows one way (docs/architecture.md): no module imports a layer above its own, the
module graph has no cycle, and the library never reaches into the command line or the gin
wing, so `t5forge.load(config=<gin file>)` and `t5forge.convert` work without them."""

import ast
from pathlib import Path

from commands import python

import t5forge

PACKAGE = Path(t5forge.__file__).parent
TINY_GIN = PACKAGE / "configs" / "models" / "t5_1_1" / "tiny.gin"

# Lowest first. A module may import its own unit (the top-level module or package under
# t5forge/ it belongs to) and units of lower layers; units sharing a layer never import each
# other. "t5forge" is the package itself (t5forge.load, t5forge.train, ..., __version__).
LAYERS = [
    ("errors", "version", "host_memory", "user_code"),
    ("storage", "compile_cache"),
    ("data", "models", "event_files"),
    ("training", "seqio", "tasks"),
    ("t5",),
    ("compat",),
    ("interop",),
    ("checkpoints",),
    ("api",),
    ("run", "serving"),
    ("gin_config",),
    ("t5forge",),
    ("cli",),
    ("__main__",),
]
RANK = {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}

# Inside data/ its families flow one way too, lowest first (a family is the folder or
# top-level module under t5forge/data/); t5forge.data itself, the API users import, is above
# them all, so no data module imports it.
DATA_LAYERS = [
    (
        "buckets",
        "feature_converters",
        "grain_ops",
        "metrics",
        "sentencepiece_ties",
        "vocabulary_locations",
    ),
    ("tf_formats", "vocabularies"),
    ("cache", "preprocessors", "sources"),
    ("providers",),
    ("batch_iterator", "evaluator", "vocab_trainer"),
]
DATA_RANK = {family: rank for rank, layer in enumerate(DATA_LAYERS) for family in layer}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["t5forge", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _unit(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def _data_family(module: str) -> str:
    return module.split(".")[2]


def _imported_names(module: str, path: Path) -> set[str]:
    """Every name `module` imports, at the top or inside a function (lazily), plus the dotted
    t5forge module names it holds as strings for importlib."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("t5forge."):
                names.add(node.value)
    return names


def _import_graph() -> dict[str, set[str]]:
    """module -> the t5forge modules it imports (`from pkg import name` counts as pkg when
    name is not a module)."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("t5forge") and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def test_every_module_belongs_to_a_layer():
    assert sorted({_unit(m) for m in _modules()} - set(RANK)) == []


def test_no_module_shadows_a_public_function():
    """Importing a module `t5forge.train` would replace the function `t5forge.train`."""
    top_level = {module.partition(".")[2] for module in _modules()}
    assert sorted(top_level & set(t5forge.__all__)) == []


def test_no_module_imports_a_layer_above_its_own():
    back = sorted(
        f"{module} -> {target}"
        for module, targets in _import_graph().items()
        for target in targets
        if _unit(target) != _unit(module) and RANK[_unit(target)] >= RANK[_unit(module)]
    )
    assert back == []


def test_every_data_module_belongs_to_a_data_layer():
    families = {_data_family(m) for m in _modules() if m.startswith("t5forge.data.")}
    assert sorted(families - set(DATA_RANK)) == []


def test_no_data_module_imports_a_data_layer_above_its_own():
    back = sorted(
        f"{module} -> {target}"
        for module, targets in _import_graph().items()
        if module.startswith("t5forge.data.")
        for target in targets
        if target == "t5forge.data"
        or (
            target.startswith("t5forge.data.")
            and _data_family(target) != _data_family(module)
            and DATA_RANK[_data_family(target)] >= DATA_RANK[_data_family(module)]
        )
    )
    assert back == []


def test_the_module_graph_has_no_cycle():
    graph = _import_graph()
    state: dict[str, str] = {}  # "open" while on the path, "done" once every import is seen
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


_SCRIPT = """
import importlib, pkgutil, sys
import t5forge

for package in (
    "data", "models", "training", "checkpoints", "run", "interop", "serving", "tasks"
):
    path = importlib.import_module(f"t5forge.{package}").__path__
    for module in pkgutil.walk_packages(path, f"t5forge.{package}."):
        importlib.import_module(module.name)
importlib.import_module("t5forge.api")
checkpoint, gin_file, output = sys.argv[1:]
t5forge.load(checkpoint, config=gin_file)
t5forge.convert(checkpoint, output, from_="t5x", to="t5forge", config=gin_file)
print(sorted(name for name in sys.modules if name.startswith(("t5forge.cli", "t5forge.gin_config"))))
"""


def test_the_library_never_imports_the_command_line(shared_data, tmp_path):
    checkpoint = shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"
    result = python("-c", _SCRIPT, checkpoint, TINY_GIN, tmp_path / "out", check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
