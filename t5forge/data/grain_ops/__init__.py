"""The grain operations t5forge adds: batched maps and resumable regrouping (regroup), SeqIO's
streaming shuffle (shuffle_buffer), tf.data's deterministic interleave (interleave), and
datasets for streaming splits and mixtures (adapters)."""
