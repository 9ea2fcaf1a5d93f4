"""Writes a random-weight T5Gemma in transformers' format, shaped by t5forge's model gin files.

    .venv/bin/python examples/t5gemma_en_de/random_t5gemma.py \
        --gin_file=models/t5gemma/s_s.gin --vocab runs/t5gemma_en_de/spiece.model \
        --output runs/t5gemma_en_de/hf

transformers builds and initialises the network (T5GemmaForConditionalGeneration, its own
random init) from the config.json t5forge would export for the gin files' T5Config, and saves
it as a Hugging Face directory, the SentencePiece model beside it as Gemma's tokenizer.model.
It stands in for a downloaded google/t5gemma-s-s-* checkpoint, which this machine cannot fetch
(gated, no network): `t5forge convert --from hf` and fine-tuning read it the same way.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import gin
import torch
import transformers

import t5forge
from t5forge.interop import hf_t5gemma
from t5forge.interop.gin_model_config import config_from_gin

MODEL_GIN_DIR = Path(t5forge.__file__).parent / "configs"  # where models/t5gemma/*.gin live


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gin_file", action="append", required=True, help="model gin file(s)")
    parser.add_argument("--gin", action="append", default=[], help="a binding, e.g. T5Config.x=1")
    parser.add_argument("--vocab", required=True, help="SentencePiece model to ship")
    parser.add_argument("--output", required=True, help="directory to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    gin.add_config_file_search_path(str(MODEL_GIN_DIR))  # for their includes
    files = [name if Path(name).exists() else str(MODEL_GIN_DIR / name) for name in args.gin_file]
    gin.parse_config_files_and_bindings(files, args.gin, skip_unknown=True)
    hf_config = transformers.T5GemmaConfig(**hf_t5gemma.config_to_hf(config_from_gin()))
    torch.manual_seed(args.seed)
    model = transformers.T5GemmaForConditionalGeneration(hf_config)
    output = Path(args.output)
    model.save_pretrained(output)
    shutil.copy(args.vocab, output / hf_t5gemma.TOKENIZER_FILE)
    print(f"{output}: random T5Gemma, {model.num_parameters():,} parameters")
    return output


if __name__ == "__main__":
    main()
