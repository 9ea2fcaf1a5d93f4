"""The one tiny T5 the tests build and train: 2+2 layers of width 32 over the 1000-piece
vocabulary of `tiny_vocab` (tests/conftest.py), as a T5Config for Python and as gin for commands.
"""

from t5forge.models.configs import T5Config

TINY_VOCAB_PIECES = 1000
TINY_FIELDS = {
    "vocab_size": 1152,  # 1000 pieces + 100 sentinels, rounded up to a multiple of 128
    "emb_dim": 32,
    "num_heads": 4,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
    "head_dim": 8,
    "mlp_dim": 64,
    "dtype": "float32",
}
TINY_CONFIG = T5Config(**TINY_FIELDS)
# Appended after a full-size gin file (later gin files win), it shrinks any T5Config to the same
# model, so real commands run in seconds on a CPU.
TINY_MODEL_GIN = "".join(f"T5Config.{name} = {value!r}\n" for name, value in TINY_FIELDS.items())
# The same model as the values of T5X network overrides (`--gin.network.T5Config.NAME=VALUE`).
TINY_GIN_VALUES = {name: repr(value) for name, value in TINY_FIELDS.items()}
