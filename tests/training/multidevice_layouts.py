"""The layouts both 8-virtual-device check scripts compare, and how they report a layout.

The scripts run as `python tests/training/<script>.py`, so this folder is first on sys.path and
they import this module by its bare name.
"""

import jax

from t5forge.training import partitioning


def eight_device_layouts() -> dict[str, partitioning.PjitPartitioner]:
    """Partitioners for 1 device, 4 data x 2 model, and FSDP on that 4 x 2 mesh."""
    assert jax.device_count() == 8, "set XLA_FLAGS=--xla_force_host_platform_device_count=8"
    return {
        "single": partitioning.PjitPartitioner(devices=jax.devices()[:1]),
        "data4_model2": partitioning.PjitPartitioner(num_partitions=2),
        "fsdp": partitioning.PjitPartitioner(mesh_shape=(4, 2), fsdp=True),
    }


def partition_specs(tree) -> dict[str, str]:
    """Each array's PartitionSpec as text, keyed by its path (`.params['mlp']['wi']['kernel']`)."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): str(leaf.sharding.spec) for path, leaf in flat}
