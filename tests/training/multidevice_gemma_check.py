"""multidevice_trainer_check.py's report for T5Gemma and T5Gemma 2 networks (grouped-query
attention, RoPE, windows, merged attention...): five train steps on 1 device, 4 data x 2
model, and FSDP. Run with 8 virtual CPU devices, as test_gemma_multidevice.py does."""

import json

from multidevice_layouts import eight_device_layouts
from multidevice_trainer_check import VOCAB, make_batches, run

from tests.models.test_gemma_switches import GEMMA_3, _gemma

FAMILIES = {"t5gemma": {}, "t5gemma2": GEMMA_3}


def main():
    batches = make_batches()
    report = {
        family: {
            name: run(partitioner, batches, _gemma(vocab_size=VOCAB, **switches))
            for name, partitioner in eight_device_layouts().items()
        }
        for family, switches in FAMILIES.items()
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
