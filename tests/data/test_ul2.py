"""UL2's mixture of denoisers: statistics over 10k+ examples, reassembly, mode tokens, resume."""

import functools
import itertools

import numpy as np
import pytest
from denoising_checks import assert_resumes_exactly, restored_tokens

from t5forge.data import Feature, FunctionSource, Task
from t5forge.data import preprocessors as pp
from t5forge.errors import DataError

EXTRA_IDS = 100
LENGTHS = {"inputs": 512, "targets": 114}
# The paper's seven denoisers, each with a mode text of its own so a test can tell them apart.
SPANS = tuple(zip(pp.UL2_DENOISERS["mean_noise_span_lengths"], pp.UL2_DENOISERS["noise_densities"]))
TAGS = tuple(f"[D{i}]" for i in range(len(SPANS) + 1))
RATES = (1, 1, 1, 1, 1, 1, 2)


def _random_documents(split, vocab_size=2000 - EXTRA_IDS):
    """Documents of random ordinary ids (no pad, EOS, UNK or sentinel), 200-2000 tokens."""
    rng = np.random.default_rng(0)
    return [
        {"targets": rng.integers(3, vocab_size, size=int(rng.integers(200, 2000)), dtype=np.int32)}
        for _ in range(7000)
    ]


def _ul2_task(name, vocabulary, source, **options):
    feature = Feature(vocabulary)
    steps = [*source[1], pp.ul2_objective.bind(**options), pp.append_eos_after_trim]
    return Task(name, source[0], steps, {"inputs": feature, "targets": feature})


def _tagged(vocabulary, **options):
    settings = {
        **pp.UL2_DENOISERS,
        "optional_task_prefixes": TAGS,
        "rates": RATES,
        **options,
    }
    source = (FunctionSource(_random_documents, ["train"]), [pp.CacheDatasetPlaceholder()])
    return _ul2_task("test_ul2_tagged", vocabulary, source, **settings)


def _denoiser_of(inputs, prompts):
    (index,) = [i for i, p in enumerate(prompts) if inputs[: len(p)].tolist() == p]
    return index


@pytest.fixture(scope="module")
def tagged_examples(english_vocab):
    prompts = [english_vocab.encode(tag) for tag in TAGS]
    assert len({tuple(p) for p in prompts}) == len(TAGS)
    task = _tagged(english_vocab)
    examples = list(task.get_dataset("train", sequence_length=LENGTHS, shuffle=False))
    return [(_denoiser_of(e["inputs"], prompts), e, len(prompts[0])) for e in examples]


def test_each_denoiser_keeps_its_density_and_mean_span_length(tagged_examples, english_vocab):
    assert len(tagged_examples) >= 10_000
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS
    for index, (mean, density) in enumerate(SPANS):
        noise = raw = spans = 0
        for denoiser, example, prompt_length in tagged_examples:
            if denoiser != index:
                continue
            inputs, targets = example["inputs"], example["targets"]
            assert len(inputs) <= LENGTHS["inputs"] and len(targets) <= LENGTHS["targets"]
            assert inputs[-1] == 1 and targets[-1] == 1  # nothing was trimmed off
            input_sentinels = int((inputs >= first_sentinel).sum())
            target_sentinels = int((targets >= first_sentinel).sum())
            assert input_sentinels == target_sentinels
            example_noise = len(targets) - 1 - target_sentinels
            noise += example_noise
            raw += len(inputs) - 1 - prompt_length - input_sentinels + example_noise
            spans += input_sentinels
        assert abs(noise / raw / density - 1) <= 0.02, (mean, density, noise / raw)
        assert abs(noise / spans / mean - 1) <= 0.02, (mean, density, noise / spans)


def test_draws_follow_the_rates(tagged_examples):
    counts = np.bincount([d for d, _, _ in tagged_examples], minlength=len(RATES))
    total = counts.sum()
    expected = total * np.asarray(RATES) / sum(RATES)
    spread = np.sqrt(expected * (1 - np.asarray(RATES) / sum(RATES)))
    assert (np.abs(counts - expected) < 4 * spread).all(), (counts, expected)


def test_prefix_lm_splits_uniformly_without_sentinels(tagged_examples, english_vocab):
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS
    segment = LENGTHS["inputs"] - len(english_vocab.encode(TAGS[0])) - 1
    prefixes = []
    for denoiser, example, prompt_length in tagged_examples:
        if denoiser != len(SPANS):
            continue
        inputs, targets = example["inputs"], example["targets"]
        assert not (inputs[prompt_length:] >= first_sentinel).any()
        assert not (targets >= first_sentinel).any()
        prefix = len(inputs) - 1 - prompt_length
        if len(targets) - 1 < LENGTHS["targets"] - 1:  # an untrimmed continuation
            continuation = len(targets) - 1
            assert prefix + continuation <= segment
        prefixes.append(prefix)
    prefixes = np.asarray(prefixes)
    assert len(prefixes) > 2000
    assert prefixes.min() >= 1 and prefixes.max() <= segment - 1
    # Uniform on [1, segment - 1]: each quarter of the range holds a quarter of the splits.
    quarters = np.bincount(np.minimum(4 * (prefixes - 1) // (segment - 1), 3), minlength=4)
    assert np.abs(quarters / len(prefixes) - 0.25).max() < 0.03, quarters


_DOCUMENTS: list[str] = []


def _english(split):
    return [{"text": text} for text in _DOCUMENTS]


@pytest.fixture(scope="module")
def english_source(english_documents):
    _DOCUMENTS[:] = english_documents
    return (
        FunctionSource(_english, ["train"]),
        [
            functools.partial(pp.rekey, key_map={"inputs": None, "targets": "text"}),
            pp.tokenize,
            pp.CacheDatasetPlaceholder(),
        ],
    )


def test_examples_reassemble_the_documents_in_order(
    english_source, english_vocab, english_documents
):
    task = _ul2_task("test_ul2_english", english_vocab, english_source, **pp.UL2_DENOISERS)
    lengths = {"inputs": 512, "targets": 512}
    examples = list(
        itertools.islice(task.get_dataset("train", sequence_length=lengths, shuffle=False), 150)
    )
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS
    modes = {tuple(english_vocab.encode(m)): m for m in ("[NLU]", "[NLG]", "[S2S]")}
    seen, restored = set(), []
    for example in examples:
        (prompt,) = [p for p in modes if example["inputs"][: len(p)].tolist() == list(p)]
        seen.add(modes[prompt])
        restored += restored_tokens(example, first_sentinel, len(prompt))
    assert seen == {"[NLU]", "[NLG]", "[S2S]"}
    stream = [i for text in english_documents[:128] for i in english_vocab.encode(text)]
    covered = min(len(stream), len(restored))
    assert restored[:covered] == stream[:covered] and covered > 40_000


@pytest.mark.parametrize("shard_ds", [True, False])
def test_resume_is_exact_anywhere(english_source, english_vocab, shard_ds):
    options = {**pp.UL2_DENOISERS, "shard_ds": shard_ds, "documents_per_merge": 8}
    task = _ul2_task(f"test_ul2_resume_{shard_ds}", english_vocab, english_source, **options)
    lengths = {"inputs": 256, "targets": 128}
    assert_resumes_exactly(task, lengths, seed=5, count=40, starts=(0, 3, 17, 33))


def test_unsharded_streams_use_every_group_once_per_denoiser(english_source, english_vocab):
    options = {
        "mean_noise_span_lengths": (3.0,),
        "noise_densities": (0.15,),
        "use_prefix_lm_task": True,
        "shard_ds": False,
        "documents_per_merge": 4,
    }
    task = _ul2_task("test_ul2_unsharded", english_vocab, english_source, **options)
    lengths = {"inputs": 256, "targets": 256}
    examples = list(
        itertools.islice(task.get_dataset("train", sequence_length=lengths, shuffle=False), 60)
    )
    first_sentinel = english_vocab.vocab_size - EXTRA_IDS
    spans = [e for e in examples if (e["inputs"] >= first_sentinel).any()]
    assert 0 < len(spans) < len(examples)
    group = [i for text in _DOCUMENTS[:4] for i in english_vocab.encode(text)]
    span_tokens = [t for e in spans for t in restored_tokens(e, first_sentinel)]
    assert span_tokens[: len(group)] == group[: len(span_tokens)]


def test_reserved_room_and_shorter_segments_keep_targets_whole(english_vocab):
    mode = english_vocab.encode("[NLG]")
    task = _tagged(english_vocab, optional_task_prefixes=["[NLG]"] * len(TAGS))
    examples = list(
        itertools.islice(task.get_dataset("train", sequence_length=LENGTHS, shuffle=False), 300)
    )
    assert all(e["inputs"][: len(mode)].tolist() == mode for e in examples)
    assert max(len(e["inputs"]) for e in examples) <= LENGTHS["inputs"]
    assert all(e["targets"][-1] == 1 for e in examples)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"mean_noise_span_lengths": (3.0, 8.0)}, "2 mean_noise_span_lengths but 1"),
        ({"rates": (1.0, 2.0)}, "rates [1.0, 2.0] must be 1 non-negative"),
        ({"optional_task_prefixes": ("[NLU]", "[S2S]")}, "2 optional_task_prefixes for 1"),
        ({"noise_densities": (1.5,)}, "noise density 1.5 is outside (0, 1)"),
        ({"mean_noise_span_lengths": (64.0,), "noise_densities": (0.5,)}, "leave no room"),
    ],
)
def test_bad_settings_are_one_line(english_vocab, options, message):
    source = (FunctionSource(_random_documents, ["train"]), [])
    task = _ul2_task("test_ul2_bad", english_vocab, source, **options)
    lengths = {"inputs": 512, "targets": 114}
    if "leave no room" in message:
        lengths = {"inputs": 3, "targets": 2}
    with pytest.raises(DataError, match="ul2_objective") as error:
        next(iter(task.get_dataset("train", sequence_length=lengths, shuffle=False)))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_prepend_prompt_puts_the_same_ids_as_pretraining(english_vocab):
    features = {"inputs": Feature(english_vocab), "targets": Feature(english_vocab)}
    example = {"inputs": np.asarray(english_vocab.encode("a review"), np.int32), "targets": [5]}
    out = pp.prepend_prompt(example, features, prompt_mode="[NLU]")
    mode = english_vocab.encode("[NLU]")
    assert out["inputs"].tolist() == mode + english_vocab.encode("a review")
    assert pp.prepend_prompt(example, features)["inputs"] is example["inputs"]
