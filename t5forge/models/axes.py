"""The logical axis names (T5X's) that parameters and activations are annotated with.

The models write them and training/partitioning.py's rules map them onto the device mesh; one
spelling for both sides, so a renamed axis cannot silently stop being sharded.
"""

BATCH = "batch"
LENGTH = "length"
EMBED = "embed"
VOCAB = "vocab"
MLP = "mlp"
HEADS = "heads"
KV = "kv"  # one head's width
JOINED_KV = "joined_kv"  # heads * kv, the projection kernels' output
RELPOS_BUCKETS = "relpos_buckets"
LAYERS = "layers"  # the stacked layer axis of scan_layers
