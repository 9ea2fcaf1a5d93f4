"""LongT5 and Switch Transformers served: each scheduler's greedy and beam outputs equal the
Python API's `generate` on the same tiny random model, read back from a Hugging Face directory
as a user's would be (docs/model-families.md says both families serve)."""

import dataclasses

import httpx
import jax
import pytest
from server_helpers import TINY_CONFIG, running_server

import t5forge
from t5forge.interop.huggingface import save_hf_dir
from t5forge.models.model import build_model
from t5forge.models.presets import get_config

TEXTS = ["Click the Save button.", "Deletes the selected rows in the table.", "a"]
CONFIGS = {
    "longt5_local": dataclasses.replace(TINY_CONFIG, encoder_attention="local", local_radius=2),
    "longt5_transient_global": dataclasses.replace(
        TINY_CONFIG, encoder_attention="transient_global", local_radius=2, global_block_size=2
    ),
    # Hugging Face's routing (one group per sequence), as a converted Switch checkpoint has it.
    "switch": get_config(
        "t5_1_0/tiny",
        vocab_size=TINY_CONFIG.vocab_size,
        dtype="float32",
        num_experts=4,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        routing_groups="sequence",
        expert_capacity=64,
    ),
}


def predict(url: str, **body) -> list[str]:
    response = httpx.post(f"{url}/v1/predict", json={"inputs": TEXTS, **body}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["outputs"]


@pytest.mark.slow
@pytest.mark.parametrize("family", CONFIGS)
def test_served_outputs_equal_generate(family, tmp_path, tiny_vocab):
    config = CONFIGS[family]
    params = jax.device_get(build_model(config).init_params(jax.random.PRNGKey(0)))
    save_hf_dir(params, config, tmp_path, vocab_path=tiny_vocab, extra_ids=100)
    model = t5forge.load(tmp_path)
    greedy = model.generate(TEXTS, max_length=6)
    beam = model.generate(TEXTS, max_length=6, method="beam", num_beams=2)
    for scheduler in ("continuous", "static"):
        with running_server(model, scheduler=scheduler) as (url, _):
            assert predict(url, max_new_tokens=6) == greedy, scheduler
            assert predict(url, max_new_tokens=6, method="beam", num_beams=2) == beam, scheduler
