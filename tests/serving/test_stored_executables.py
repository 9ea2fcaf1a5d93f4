"""A restarted server loads every compiled program from its store (ready with every shape,
nothing compiled); a store made for anything else, or damaged, is refused and compiled anew."""

import copy
import dataclasses
import logging
import os
import pickle
import shutil
import threading
import time

import httpx
import jax
import jax.numpy as jnp
import pytest
from jax._src import dispatch  # the name of JAX's compile event
from server_helpers import TEST_SETTINGS, serving_in_thread, settings_on_free_port, wait_ready

from t5forge.serving import InferenceService
from t5forge.serving.engine import Engine, ScorePair
from t5forge.serving.executables import ExecutableStore

TEXT = "Click the Save button."
REQUESTS = [
    ("/v1/predict", {"inputs": [TEXT, "Delete the row."]}),
    ("/v1/predict", {"inputs": [TEXT], "method": "sample", "seed": 3, "temperature": 0.8}),
    ("/v1/predict", {"inputs": [TEXT], "stream": True, "max_new_tokens": 12}),
    ("/v1/predict", {"inputs": [TEXT], "method": "beam", "num_beams": 2}),
    ("/v1/score", {"inputs": [TEXT, TEXT], "targets": ["Speichern.", "Nein."]}),
    ("/v1/classify", {"inputs": [TEXT], "choices": ["Ja.", "Nein."]}),
]
PAIRS = [ScorePair([5, 9, 3, 1], [7, 8, 1]), ScorePair([14, 3, 1], [6, 1])]


def _answers(url: str) -> list[str]:
    answers = []
    for path, body in REQUESTS:
        answer = httpx.post(f"{url}{path}", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        answers.append(answer.text)
    return answers


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_a_restart_is_ready_with_every_shape_loaded_and_compiles_nothing(
    scheduler, tiny_model, tmp_path
):
    first = InferenceService(
        tiny_model, settings_on_free_port(scheduler=scheduler, compile_cache=str(tmp_path))
    )
    with serving_in_thread(first) as url:
        wait_ready(url)
        expected = _answers(url)
        deadline = time.monotonic() + 120
        while not first.engine.programs.path.exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # stored once every shape is compiled
    programs = first.engine.programs.compiled
    assert programs > 0 and first.engine.programs.loaded == 0

    compiles = []

    def record(event: str, duration: float, **details) -> None:
        if event == dispatch.BACKEND_COMPILE_EVENT:
            compiles.append(details.get("fun_name"))

    restarted = InferenceService(
        tiny_model, settings_on_free_port(scheduler=scheduler, compile_cache=str(tmp_path))
    )
    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        with serving_in_thread(restarted) as url:
            wait_ready(url, every_shape=False)
            health = httpx.get(f"{url}/healthz").json()
            # Ready means every shape: the stored ones load before the server says so.
            assert health["status"] == "ready" and health["compiled"] == health["of"]
            assert restarted.engine.programs.loaded == programs
            assert restarted.engine.programs.compiled == 0
            assert _answers(url) == expected  # streamed, sampled and beam answers too
    finally:
        jax.monitoring.unregister_event_duration_listener(record)
    # Nothing a request runs was compiled (JAX's own small programs, if any, were compiled
    # by the first server in this process already).
    assert compiles == [], compiles


def _engine(model, directory, **changes) -> Engine:
    return Engine(
        model, dataclasses.replace(TEST_SETTINGS, compile_cache=str(directory), **changes)
    )


def _stored_engine(tiny_model, tmp_path) -> tuple[Engine, list[float]]:
    """An engine that scored PAIRS (compiling their program) and stored it; the scores."""
    engine = _engine(tiny_model, tmp_path)
    scores = engine.score(PAIRS)
    engine.programs.save()
    return engine, scores


def test_changed_xla_flags_or_config_change_the_key_and_an_old_store_is_refused(
    tiny_model, tmp_path, monkeypatch, caplog
):
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's own (conftest.py)
    stored, scores = _stored_engine(tiny_model, tmp_path)
    same = _engine(tiny_model, tmp_path, port=9999)  # the port shapes no program
    assert same.programs.path == stored.programs.path and same.programs.load() == 1
    assert same.score(PAIRS) == scores and same.programs.loaded == 1

    monkeypatch.setenv("XLA_FLAGS", f"{flags} --xla_cpu_enable_fast_math=false")
    flagged = _engine(tiny_model, tmp_path)
    assert flagged.programs.path != stored.programs.path
    assert flagged.programs.load() == 0  # nothing stored under the new key
    monkeypatch.setenv("XLA_FLAGS", flags)
    longer = _engine(tiny_model, tmp_path, max_target_length=32)
    assert longer.programs.path != stored.programs.path
    reconfigured = copy.copy(tiny_model)
    reconfigured.config = dataclasses.replace(tiny_model.config, num_decoder_layers=3)
    other_model = _engine(reconfigured, tmp_path)
    assert other_model.programs.identity["model"] != stored.programs.identity["model"]
    assert other_model.programs.path != stored.programs.path

    # The old store put where the new key looks: refused, naming what differs.
    monkeypatch.setenv("XLA_FLAGS", f"{flags} --xla_cpu_enable_fast_math=false")
    flagged = _engine(tiny_model, tmp_path)
    flagged.programs.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(stored.programs.path, flagged.programs.path)
    with caplog.at_level(logging.WARNING, logger="t5forge.serving.executables"):
        assert flagged.programs.load() == 0
    assert "were made for another XLA flags; compiling instead" in caplog.text
    assert flagged.score(PAIRS) == scores
    assert (flagged.programs.loaded, flagged.programs.compiled) == (0, 1)
    monkeypatch.setenv("XLA_FLAGS", flags)
    shutil.copy(stored.programs.path, other_model.programs.path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="t5forge.serving.executables"):
        assert other_model.programs.load() == 0
    assert "were made for another model; compiling instead" in caplog.text


def test_a_damaged_store_or_entry_is_compiled_anew(tiny_model, tmp_path, caplog):
    stored, scores = _stored_engine(tiny_model, tmp_path)
    path = stored.programs.path
    with open(path, "rb") as file:
        contents = pickle.load(file)
    (signature, (executable, *trees)), *_ = contents["programs"].items()
    contents["programs"][signature] = (executable[: len(executable) // 2], *trees)
    with open(path, "wb") as file:
        pickle.dump(contents, file)
    entry = _engine(tiny_model, tmp_path)
    with caplog.at_level(logging.WARNING, logger="t5forge.serving.executables"):
        assert entry.programs.load() == 1
        assert entry.score(PAIRS) == scores
    assert "stored executable of score is unusable" in caplog.text
    assert (entry.programs.loaded, entry.programs.compiled) == (0, 1)

    path.write_bytes(b"not a store")
    caplog.clear()
    damaged = _engine(tiny_model, tmp_path)
    with caplog.at_level(logging.WARNING, logger="t5forge.serving.executables"):
        assert damaged.programs.load() == 0
    assert f"stored executables {path} are unreadable" in caplog.text
    assert damaged.score(PAIRS) == scores and damaged.programs.compiled == 1


@pytest.fixture
def fresh_compiles():
    """Neither of JAX's caches keys on source locations, so a program an earlier test in this
    process compiled (in memory, or through the persistent cache an in-process command turns
    on) would come back with its locations, whatever the store stripped."""
    before = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    jax.clear_caches()
    yield
    jax.config.update("jax_enable_compilation_cache", before)


def test_stored_programs_leave_out_source_locations_and_score_the_same(
    tiny_model, tmp_path, fresh_compiles
):
    from jax.experimental import serialize_executable

    stored, scores = _stored_engine(tiny_model, tmp_path)
    in_memory = Engine(tiny_model, dataclasses.replace(TEST_SETTINGS, compile_cache=""))
    assert in_memory.score(PAIRS) == scores  # bit for bit
    # The source file of the network's ops, in their HLO metadata.
    (kept,) = in_memory.programs._compiled.values()
    assert b"t5forge/models/layers.py" in serialize_executable.serialize(kept)[0]
    assert b"t5forge/models/layers.py" not in stored.programs.path.read_bytes()


def test_two_threads_wanting_one_program_compile_it_once():
    """The warm-up's thread and a request's can ask for the same program at once (a beam
    request while beam search's shape is warming up): one compiles, the other waits for it."""
    store = ExecutableStore.in_memory()
    both_asked = threading.Barrier(2)

    @jax.jit
    def product(x):
        return jnp.tanh(x @ x.T).sum()

    lowerings = []

    class Slow:
        """`product`, whose first lowering waits until the other thread asks for it too."""

        def lower(self, *arguments):
            lowerings.append(threading.current_thread().name)
            if len(lowerings) == 1:
                both_asked.wait(timeout=5)
            return product.lower(*arguments)

    x = jnp.ones((64, 64))
    results = []

    def ask():
        results.append(store.compile("product", Slow(), None, x))

    first = threading.Thread(target=ask, name="first")
    first.start()
    late = threading.Thread(target=lambda: (both_asked.wait(timeout=5), ask()), name="late")
    late.start()
    first.join(timeout=60)
    late.join(timeout=60)
    assert lowerings == ["first"] and store.compiled == 1
    assert len(results) == 2 and results[0] is results[1]


def test_a_program_is_found_again_by_its_arguments_shapes_dtypes_and_options():
    """Each call looks its executable up by shapes, dtypes and static options (the fast key
    that replaced formatting the signature per call): equal ones find the program compiled
    first, and any difference is another program, never the wrong one run."""
    store = ExecutableStore.in_memory()
    lowerings = []

    class Counted:
        def lower(self, weights, x, *, scale):
            lowerings.append((x.shape, x.dtype.name, scale))
            return jax.jit(lambda w, v: w.sum() * (v * scale).sum()).lower(weights, x)

    weights = jnp.ones((4,))
    first = store.compile("p", Counted(), None, weights, jnp.ones((4,)), scale=2)
    again = store.compile("p", Counted(), None, weights, jnp.zeros((4,)), scale=2)
    assert again is first and len(lowerings) == 1
    store.compile("p", Counted(), None, weights, jnp.ones((4,), jnp.bfloat16), scale=2)
    store.compile("p", Counted(), None, weights, jnp.ones((8,)), scale=2)
    store.compile("p", Counted(), None, weights, jnp.ones((4,)), scale=3)
    assert lowerings == [
        ((4,), "float32", 2),
        ((4,), "bfloat16", 2),
        ((8,), "float32", 2),
        ((4,), "float32", 3),
    ]
    assert store.compiled == 4
