"""T5X's own gin files under `t5forge train|eval|infer`, unchanged.

T5X's files start with `from __gin__ import dynamic_registration` and import `seqio`,
`t5x.utils`, `t5x.models`, ..., `__main__ as train_script`. While gin parses, those module
names resolve to stand-ins holding t5forge's implementation of each configurable
(modules.py); the table of names and what happens to each parameter is names.py (joining
run_names.py, training_names.py, model_names.py and moe_names.py); after the
parse, translate.py moves the bindings onto t5forge's configurables and reports, by file and
line, what t5forge ignores or refuses. gin_flags.parse_gin drives the three. Flaxformer's
model files (`from flaxformer.components import dense`, ...) parse the same way: their names
are flaxformer_names.py, each layer's hyperparameters moved onto the one T5Config.
"""

from t5forge.gin_config.t5x_compat.modules import t5x_module_names
from t5forge.gin_config.t5x_compat.names import shadowed_parameters
from t5forge.gin_config.t5x_compat.translate import translate

__all__ = ["shadowed_parameters", "t5x_module_names", "translate"]
