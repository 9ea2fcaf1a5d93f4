"""One T5X or Flaxformer gin name and the rule for each of its parameters (the entries
names.py joins: run_names.py, training_names.py, model_names.py, moe_names.py and
flaxformer_names.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from t5forge.gin_config.t5x_compat.rules import Rule

# Names with a twin that T5X's files also bind in files without imports.
BOUND_WITHOUT_IMPORT = ("T5Config",)


@dataclasses.dataclass(frozen=True)
class T5XName:
    """One T5X gin name: `module` is T5X's import path ('t5x.utils', '__main__', 'seqio')."""

    module: str
    name: str
    rules: Mapping[str, Rule] = dataclasses.field(default_factory=dict)
    twin: str | None = None
    build: Callable | None = None
    returns_twin: bool = False
    same_object: bool = False
    # t5forge's own configurable spelled like this T5X name, which a flag written the T5X
    # way (`--gin.models.EncoderDecoderModel.z_loss=0`) binds: its bindings join this name's.
    shadowed_by: str | None = None
    # Rules for bindings in a named scope (`expert/dense.MlpBlock`), before `rules`.
    scoped_rules: Mapping[str, Mapping[str, Rule]] = dataclasses.field(default_factory=dict)
    # A real library's object (`flax.linen.Dropout`) gin registers itself while parsing.
    registered_by_gin: bool = False
    # Its Python returns the T5Config the bindings describe (T5X's or Flaxformer's network).
    builds_config: bool = False

    @property
    def t5x_path(self) -> str:
        return f"{self.module}.{self.name}"

    def rule(self, scope: str, param: str) -> Rule:
        """The rule for `param` bound in `scope` (its innermost named scope decides)."""
        for name in reversed(scope.split("/")) if scope else ():
            if param in self.scoped_rules.get(name, {}):
                return self.scoped_rules[name][param]
        return self.rules[param]

    def parameters(self) -> tuple[str, ...]:
        """Every parameter a rule names, in any scope (in the order written)."""
        return tuple(
            dict.fromkeys([*self.rules, *(p for r in self.scoped_rules.values() for p in r)])
        )

    @property
    def gin_selector(self) -> str:
        """The complete gin selector. A name with a twin gets a `t5x_` prefix, so that the
        partial selectors t5forge's files and flags write (`train.eval_period`,
        `DatasetConfig.batch_size`) keep naming the twin alone; except the names T5X's size
        files bind without importing them (`network.T5Config:` after an include), which gin
        can only find under their own name."""
        from t5forge.gin_config import gin_internals

        if self.same_object:
            return gin_internals.complete_selector(self.twin)
        if self.registered_by_gin:
            return self.t5x_path
        if self.twin and self.name not in BOUND_WITHOUT_IMPORT:
            return f"{self.module}.t5x_{self.name}"
        return self.t5x_path
