"""`t5forge.data` is the data API users import: every exported name resolves to the object its
module defines, and importing the package loads none of the data wing until a name is used."""

import importlib

from commands import python

import t5forge.data


def test_every_exported_name_resolves_to_its_module_object():
    for name, module in t5forge.data._EXPORTS.items():
        assert getattr(t5forge.data, name) is getattr(importlib.import_module(module), name), name
    for name, module in t5forge.data._MODULES.items():
        assert getattr(t5forge.data, name) is importlib.import_module(module), name
    assert sorted(t5forge.data.__all__) == sorted([*t5forge.data._EXPORTS, *t5forge.data._MODULES])


def test_importing_the_package_loads_no_data_module():
    script = (
        "import sys, t5forge.data\n"
        "print(sorted(m for m in sys.modules if m.startswith('t5forge.data.')))\n"
        "from t5forge.data import pp, Task\n"
        "print(pp.tokenize.__module__, Task.__module__)\n"
    )
    lines = python("-c", script, check=True).stdout.strip().splitlines()
    assert lines[-2] == "[]"
    assert lines[-1] == "t5forge.data.preprocessors.text t5forge.data.providers.task"
