"""Undoing span corruption in tests: an example's raw segment from its inputs and targets."""


def restored_tokens(example, first_sentinel: int, prompt_length: int = 0) -> list[int]:
    """The raw segment: each sentinel of the inputs replaced by the targets' span after it.

    Skips `prompt_length` leading input ids (a UL2 mode token) and the EOS of both; inputs
    without a sentinel (a prefix LM example) are followed by the targets.
    """
    inputs = example["inputs"][prompt_length:-1].tolist()
    targets = example["targets"][:-1].tolist()
    if not any(i >= first_sentinel for i in inputs):
        return inputs + targets
    fill, current = {}, None
    for i in targets:
        if i >= first_sentinel:
            current = fill[i] = []
        elif current is not None:
            current.append(i)
    return [t for i in inputs for t in (fill[i] if i >= first_sentinel else [i])]
