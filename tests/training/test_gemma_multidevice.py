"""T5Gemma and T5Gemma 2 networks train on 8 devices (model parallel, FSDP) as on one."""

from pathlib import Path

import numpy as np
import pytest
from commands import eight_device_report

CHECK_SCRIPT = Path(__file__).with_name("multidevice_gemma_check.py")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report():
    return eight_device_report(CHECK_SCRIPT)


@pytest.mark.parametrize("family", ["t5gemma", "t5gemma2"])
@pytest.mark.parametrize("layout", ["data4_model2", "fsdp"])
def test_losses_match_one_device(report, family, layout):
    """Tolerances as test_trainer_multidevice.py's, which says why."""
    single, sharded = report[family]["single"], report[family][layout]
    np.testing.assert_allclose(sharded["losses"][0], single["losses"][0], rtol=1e-6)
    np.testing.assert_allclose(sharded["losses"], single["losses"], rtol=2e-3)
    assert sharded["compilations"] == 1


def test_key_value_heads_split_over_the_model_axis(report):
    specs = report["t5gemma"]["data4_model2"]["specs"]
    attention = ".params['decoder']['layers_0']['self_attention']"
    assert specs[f"{attention}['key']['kernel']"] == "P(None, 'model')"
    assert specs[f"{attention}['query']['kernel']"] == "P(None, 'model')"
