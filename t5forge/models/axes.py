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
EXPERT = "expert"  # the leading axis of a sparse layer's per-expert weights
EXPERT_MLP = "expert_mlp"  # an expert's hidden width (Flaxformer's intermediate_axis_name)
EXPERT_REPLICAS = "expert_replicas"  # copies of the experts along the pure data axis
UNMODELED = "unmodeled"  # never sharded (a router's tiny per-expert dims)
