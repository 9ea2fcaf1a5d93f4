"""`from t5forge import seqio`: a SeqIO-style task module runs after changing its import line."""

import importlib
import sys
from pathlib import Path

import pytest

from t5forge import seqio
from t5forge.data import get_mixture_or_task
from t5forge.data.preprocessors.framework import ExamplePreprocessor
from t5forge.errors import ConfigError

MODULE = Path(__file__).resolve().parent / "seqio_style_tasks.py"


@pytest.fixture
def seqio_style_tasks(tiny_vocab, monkeypatch):
    monkeypatch.setenv("T5FORGE_VOCAB", str(tiny_vocab))
    monkeypatch.syspath_prepend(str(MODULE.parent))
    sys.modules.pop("seqio_style_tasks", None)
    yield importlib.import_module("seqio_style_tasks")
    sys.modules.pop("seqio_style_tasks", None)


def test_the_port_is_one_import_line():
    lines = MODULE.read_text().splitlines()
    assert "from t5forge import seqio" in lines
    assert not [
        line
        for line in lines
        if "t5forge" in line
        and line.startswith(("import", "from"))
        and line != "from t5forge import seqio"
    ]


def test_seqio_style_task_module_registers_and_runs(seqio_style_tasks):
    task = seqio.TaskRegistry.get("wmt_t2t_ende_v003")
    assert isinstance(task, seqio.Task)
    assert get_mixture_or_task("wmt_ende_mix").tasks == [task]
    examples = list(
        task.get_dataset("validation", sequence_length={"inputs": 16, "targets": 16}, shuffle=False)
    )
    assert len(examples) == 16
    first = examples[0]
    assert first["inputs_pretokenized"].startswith("translate English to German: ")
    vocab = seqio_style_tasks.VOCABULARY
    assert first["inputs"][-1] == vocab.eos_id and len(first["inputs"]) <= 16
    tokens = list(first["targets"][:-1])  # trimmed to 16 with EOS kept last
    assert tokens == list(vocab.encode(first["targets_pretokenized"]))[: len(tokens)]
    assert task.metric_fns[0](["a", "b"], ["a", "c"]) == {"exact_match": 50.0}


def test_seqio_signatures_where_behaviour_is_the_same(tiny_vocab):
    vocab = seqio.SentencePieceVocabulary(str(tiny_vocab), extra_ids=100)
    assert vocab.vocab_size == seqio.SentencePieceVocabulary(str(tiny_vocab), 100).vocab_size
    source = seqio.TextLineDataSource({"train": str(MODULE)})
    assert source.split("train")[0] == {"text": MODULE.read_text().splitlines()[0]}
    task = seqio.Task(
        "seqio_positional_order",
        source,
        {"targets": seqio.Feature(seqio.ByteVocabulary())},
        [seqio.preprocessors.rekey],
    )
    assert task.output_features["targets"].add_eos and task.preprocessors
    per_example = seqio.map_over_dataset(len)
    assert per_example("abc") == 3 and isinstance(per_example, ExamplePreprocessor)
    assert seqio.evaluation.Evaluator is seqio.Evaluator and seqio.metrics.bleu


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda v: seqio.SentencePieceVocabulary(v, reverse_extra_ids=False), "reverse_extra_ids"),
        (
            lambda v: seqio.TextLineDataSource({"train": v}, skip_header_lines=1),
            "skip_header_lines",
        ),
        (lambda v: seqio.map_over_dataset(num_seeds=2), "num_seeds"),
        (lambda v: seqio.Task("t", None, {"targets": None}, metric_objs=[object()]), "metric_objs"),
    ],
)
def test_what_differs_is_one_clear_error(tiny_vocab, make, message):
    with pytest.raises(ConfigError, match=message):
        make(str(tiny_vocab))
