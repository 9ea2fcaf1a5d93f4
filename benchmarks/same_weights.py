"""One set of T5 weights for every side of a comparison, t5forge's and the peers'.

The measuring process draws the weights once (t5forge params), builds transformers' model from
them, and writes both where the sides' worker processes (benchmarks/isolated.py) load them:
the params as a pickle for t5forge, a `save_pretrained` directory for transformers.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

EOS_ID = 1  # T5's


def never_eos(params):
    """`params` with the EOS column of the output projection zeroed, so that decoding random
    weights generates every new token: an EOS logit of exactly 0 never wins against 32k random
    logits, and no side needs a logits processor to force the length."""
    head = np.array(params["decoder"]["logits_dense"]["kernel"])
    head[:, EOS_ID] = 0.0
    params["decoder"]["logits_dense"]["kernel"] = head
    return params


def hf_model(config, params):
    """transformers' T5ForConditionalGeneration holding `params` (t5forge's tree)."""
    import torch
    import transformers

    from t5forge.interop.huggingface import config_to_hf, params_to_hf_state_dict

    hf_config = transformers.T5Config(**config_to_hf(config))
    model = transformers.T5ForConditionalGeneration(hf_config).eval()
    state_dict = {
        name: torch.tensor(value) for name, value in params_to_hf_state_dict(params, config).items()
    }
    if not config.logits_via_embedding:
        # transformers 5 ties the head at construction; T5 1.1's is its own tensor.
        model.lm_head.weight = torch.nn.Parameter(state_dict["lm_head.weight"].clone())
        model.all_tied_weights_keys.pop("lm_head.weight")
    model.load_state_dict(state_dict, strict=False)
    return model


def write_params(params, work_dir: Path) -> Path:
    """The params file `load_forge` reads in a worker."""
    path = work_dir / "params.pkl"
    with open(path, "wb") as f:
        pickle.dump(params, f)
    return path


def read_params(params_path: str):
    """The params tree `write_params` wrote."""
    with open(params_path, "rb") as f:
        return pickle.load(f)


def load_forge(params_path: str, config_name: str, dtype: str = "float32"):
    """t5forge's `Model` (activations in `dtype`) on the params `write_params` wrote."""
    from t5forge.api import Model
    from t5forge.models.presets import get_config

    return Model(get_config(config_name, dtype=dtype), read_params(params_path))


def load_hf(hf_dir: str):
    """transformers' model from the directory `hf_model(...).save_pretrained` wrote, quietly;
    the class its config.json names (T5, or T5Gemma for benchmarks/t5gemma_decode.py)."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    return transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
