"""The packing check every encoder-decoder family must pass: single rows packed into one row
(plus a padding position) give, segment by segment, the logits each row gives alone."""

import numpy as np


def assert_packed_rows_match_separate(model, params, singles: list[dict], atol=1e-5) -> None:
    """`singles` are one-row batches (encoder_input_tokens, decoder_input_tokens,
    decoder_target_tokens); each is packed as its own segment, in order."""
    packed = {
        key: np.concatenate([s[key] for s in singles] + [np.zeros((1, 1), np.int32)], axis=1)
        for key in singles[0]
    }
    for stack, key in (("encoder", "encoder_input_tokens"), ("decoder", "decoder_target_tokens")):
        segments = [[i + 1] * s[key].shape[1] for i, s in enumerate(singles)]
        packed[f"{stack}_segment_ids"] = np.array([sum(segments, []) + [0]], np.int32)
    logits = np.asarray(model.logits(params, packed))
    start = 0
    for single in singles:
        end = start + single["decoder_target_tokens"].shape[1]
        alone = model.logits(params, single)[0]
        np.testing.assert_allclose(logits[0, start:end], alone, atol=atol)
        start = end
