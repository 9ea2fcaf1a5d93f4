"""Checkpoints on disk: t5forge's own (Orbax, checksums, a bucket's local mirror), which format
a path holds, and the one reader that load, train, eval, infer, convert and serve open them with."""
