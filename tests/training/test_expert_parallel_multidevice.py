"""A tokens-choose top-2 sparse T5 trains on 8 virtual devices with an expert axis of 4 as on
one device (issue 41's done-when), experts and their Adafactor slots split over 'expert'."""

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
