"""A tokens-choose top-2 sparse T5 trains on 8 virtual devices with an expert axis of 4 as on
one device (issue 41's done-when), experts and their Adafactor slots split over 'expert', and
the compiled step moves tokens to the experts by all-to-all instead of gathering the experts."""

from pathlib import Path

import numpy as np
import pytest
from commands import eight_device_report

CHECK_SCRIPT = Path(__file__).with_name("multidevice_expert_check.py")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report():
    return eight_device_report(CHECK_SCRIPT)


@pytest.mark.parametrize("layout", ["data2_expert4", "expert4_model2"])
def test_losses_match_one_device(report, layout):
    """Tolerances as test_trainer_multidevice.py's, which says why."""
    single, sharded = report["single"], report[layout]
    assert (single["devices"], sharded["devices"]) == (1, 8)
    np.testing.assert_allclose(sharded["losses"][0], single["losses"][0], rtol=1e-6)
    np.testing.assert_allclose(sharded["losses"], single["losses"], rtol=2e-3)
    assert single["losses"][-1] < single["losses"][0]
    assert sharded["compilations"] == 1


def test_greedy_decoding_on_the_expert_mesh_matches_one_device(report):
    """Cached decoding exchanges its one-token steps' slots too (4 groups: over the expert
    axis alone on 2 data x 4 expert) and decodes what one device decodes."""
    greedy = report["greedy"]
    for layout in ("data2_expert4", "expert4_model2"):
        assert greedy[layout]["tokens"] == greedy["single"]["tokens"]
        np.testing.assert_allclose(greedy[layout]["scores"], greedy["single"]["scores"], rtol=1e-5)


def test_experts_and_their_factored_slots_are_split_over_the_expert_axis(report):
    specs = report["expert4_model2"]["specs"]
    mlp = "['encoder']['layers_0']['mlp']"
    assert specs[f".params{mlp}['expert']['wi_0']['kernel']"] == "P('expert', None, 'model')"
    assert specs[f".params{mlp}['expert']['wo']['kernel']"] == "P('expert', 'model', None)"
    assert specs[f".params{mlp}['router']['router_weights']['w']['kernel']"] == "P(None, None)"
    slots = f".opt_state.param_states{mlp}['expert']['wi_0']['kernel']"
    assert specs[f"{slots}.v_row"] == "P('expert', None)"
    assert specs[f"{slots}.v_col"] == "P('expert', 'model')"


def test_the_expert_axis_is_carved_out_of_the_data_axis(report):
    """(data, expert, model) for NUM_EXPERT_PARTITIONS x model partitions on 8 devices: the
    largest divisor of the data axis up to the partitions asked for, as T5X's mesh."""
    assert report["meshes"] == {
        "4x1": [2, 4, 1],
        "8x1": [1, 8, 1],
        "3x1": [4, 2, 1],
        "16x2": [1, 4, 2],
    }


def test_experts_that_do_not_split_over_the_expert_axis_are_refused(report):
    assert report["six_experts_on_four"] == (
        "the model's 6 experts do not split over the expert axis of 4 devices; choose "
        "NUM_EXPERT_PARTITIONS so that the expert axis divides 6"
    )


# The sparse layers' operations carry .../mlp/... in the compiled HLO's op_name metadata.
SPARSE_LAYER = "/mlp/"


@pytest.mark.parametrize("layout", ["data2_expert4", "expert4_model2"])
def test_sparse_layers_move_tokens_to_their_experts_by_all_to_all(report, layout):
    """In the compiled step each of the 4 sparse layers sends its slots to the experts' devices
    and back by all-to-all, forward and backward; the experts' kernels are never gathered."""
    found = report[layout]["collectives"]
    exchanges = [source for kind, _, source in found if kind == "all-to-all"]
    assert len(exchanges) == 4 * 4
    assert all(SPARSE_LAYER in source for source in exchanges)
    gathered = [(arrays, source) for kind, arrays, source in found if kind == "all-gather"]
    sparse = [(arrays, source) for arrays, source in gathered if SPARSE_LAYER in source]
    if layout == "expert4_model2":
        # every layer's groups split over the 4 batch devices: the layers gather nothing
        assert sparse == []
        return
    # 2 data x 4 expert: the encoder's 8 groups per layer split over the 8 devices and gather
    # nothing; the decoder's 4 split over the expert axis only, so each data pair gathers its
    # one shared group's router probabilities (forward) and token gradients (backward).
    assert sorted(arrays for arrays, _ in sparse) == [["f32[1,16,4]"]] * 2 + [["f32[1,16,8]"]] * 2
    assert all("/decoder/" in source for _, source in sparse)
