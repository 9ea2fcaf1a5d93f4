"""benchmarks/harness.py and report.py without any model: statistics, the shared-CPU label,
the results file and the block of docs/benchmarks.md (benchmarks themselves never run in tests)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import harness  # noqa: E402
import report  # noqa: E402
from isolated import IsolatedSide  # noqa: E402

from t5forge.errors import T5ForgeError  # noqa: E402


def test_cpu_model_is_read_from_cpuinfo():
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
    assert harness.cpu_model(cpuinfo) == "AMD EPYC 7B13"
    assert harness.cpu_model("processor\t: 0\n") == "unknown"


def test_load_above_threshold_means_shared_cpu():
    assert harness.is_shared(0.31)
    assert not harness.is_shared(0.3)
    assert not harness.is_shared(0.0)


def test_wait_for_idle_polls_until_the_load_settles(monkeypatch):
    loads = iter([0.9, 0.5, 0.2, 5.0])
    monkeypatch.setattr(harness, "load_average", lambda: next(loads))
    monkeypatch.setattr(harness.time, "sleep", lambda seconds: None)
    assert harness.wait_for_idle(settle_seconds=60) == 0.2
    assert harness.wait_for_idle(settle_seconds=0) == 5.0  # no wait asked: as it is


def test_summary_is_median_min_max_and_throughput_of_the_median():
    samples = harness.Samples(
        seconds=[3.0, 1.0, 2.0, 5.0, 4.0], cpu_seconds=[6.0, 2.0, 4.0, 10.0, 8.0]
    )
    summary = harness.summarize(samples, work=300, unit="tokens/s")
    assert summary == {
        "repeats": 5,
        "median_s": 3.0,
        "min_s": 1.0,
        "max_s": 5.0,
        "cpu_seconds": 6.0,
        "throughput": 100.0,
        "unit": "tokens/s",
    }


def test_ratio_is_higher_when_ours_is_faster_for_both_metrics():
    ours = {"median_s": 1.0, "throughput": 40.0}
    peer = {"median_s": 4.0, "throughput": 10.0}
    assert harness.ratio(ours, peer, "throughput") == 4.0
    assert harness.ratio(ours, peer, "latency") == 4.0
    assert harness.ratio({"p99_ms": 500.0}, {"p99_ms": 2000.0}, "p99_ms") == 4.0


def test_fewer_than_five_repetitions_are_refused():
    assert harness.repeats("5") == 5
    with pytest.raises(argparse.ArgumentTypeError, match="at least 5"):
        harness.repeats("4")


def test_decode_settings_pick_a_subset_and_name_the_choices_when_wrong():
    import decode

    assert decode._settings("beam") == ["beam"]
    assert decode._settings(" batch1 , greedy") == ["batch1", "greedy"]
    with pytest.raises(argparse.ArgumentTypeError, match="subset of greedy, beam, batch1"):
        decode._settings("beam,beam8")


def test_sides_take_turns_after_their_warm_up():
    calls, clock = [], iter(range(100))
    sides = {name: (lambda name=name: calls.append(name) or name) for name in ("a", "b")}
    samples = harness.time_interleaved(
        sides, repeats=5, warmup=1, cpu_clock=lambda: float(next(clock))
    )
    assert calls == ["a", "b"] + ["a", "b"] * 5
    assert [len(samples[name].seconds) for name in "ab"] == [5, 5]
    assert samples["a"].cpu_seconds == [1.0] * 5  # one clock tick inside each timed call
    assert samples["b"].output == "b"


def test_blocks_run_each_side_back_to_back_after_its_own_warm_up():
    calls, clock = [], iter(range(100))
    sides = {name: (lambda name=name: calls.append(name) or name) for name in ("a", "b")}
    samples = harness.time_in_blocks(
        sides, repeats=5, warmup=2, cpu_clock=lambda: float(next(clock))
    )
    assert calls == ["a"] * 7 + ["b"] * 7
    assert [len(samples[name].seconds) for name in "ab"] == [5, 5]
    assert samples["b"].cpu_seconds == [1.0] * 5


def _benchmark(tmp_path, monkeypatch, load: float) -> harness.Benchmark:
    monkeypatch.setattr(harness, "load_average", lambda: load)
    bench = harness.Benchmark(
        "decode", {"batch": 8, "work_dir": tmp_path}, results=tmp_path / "results" / "decode.json"
    )
    fast = harness.Samples([1.0, 1.0, 2.0, 1.0, 1.0], [0.5] * 5)
    slow = harness.Samples([4.0, 4.0, 4.0, 5.0, 3.0], [1.0] * 5)
    bench.record("greedy: t5forge", fast, 512, "new tokens/s")
    bench.record("greedy: transformers", slow, 512, "new tokens/s")
    bench.compare(
        "greedy decode, batch 8",
        "greedy: t5forge",
        "greedy: transformers",
        peer_label="transformers",
    )
    bench.peer_missing(
        "greedy decode, batch 8",
        "greedy: t5forge",
        "ctranslate2 int8",
        "not installed (pip install -e .[bench])",
    )
    return bench


def test_results_file_names_machine_load_commit_and_every_side(tmp_path, monkeypatch):
    path = _benchmark(tmp_path, monkeypatch, load=0.1).finish()
    result = json.loads(path.read_text())
    assert result["name"] == "decode"
    assert result["machine"]["cores"] >= 1 and result["machine"]["cpu"]
    assert result["load_before"] == result["load_after"] == 0.1
    assert result["shared_cpu"] is False
    assert isinstance(result["commit"], str) and isinstance(result["dirty"], bool)
    assert result["date"][:2] == "20"
    assert result["settings"] == {"batch": 8, "work_dir": str(tmp_path)}
    ours = result["sides"]["greedy: t5forge"]
    assert (ours["median_s"], ours["min_s"], ours["max_s"]) == (1.0, 1.0, 2.0)
    assert ours["throughput"] == 512.0 and ours["cpu_seconds"] == 0.5
    assert [c["ratio"] for c in result["comparisons"]] == [4.0, None]


def test_results_block_names_provenance_and_the_missing_peer(tmp_path, monkeypatch):
    result = json.loads(_benchmark(tmp_path, monkeypatch, load=0.1).finish().read_text())
    block = report.results_block([result])
    assert block.startswith(report.BLOCK_START) and block.endswith(report.BLOCK_END)
    assert (
        "| greedy decode, batch 8 (`benchmarks/decode.py`) | 512.0 new tokens/s | "
        "transformers 128.0 new tokens/s | 4.00x |"
    ) in block
    assert "ctranslate2 int8: not installed (pip install -e .[bench]) | n/a |" in block
    assert f"commit {result['commit']}" in block and result["date"] in block
    assert f"({result['machine']['cores']} cores)" in block
    assert "load average 0.10 before / 0.10 after" in block
    assert harness.SHARED_LABEL not in block


def test_shared_cpu_results_are_refused_unless_allowed_and_then_marked(tmp_path, monkeypatch):
    result = json.loads(_benchmark(tmp_path, monkeypatch, load=2.5).finish().read_text())
    assert result["shared_cpu"] is True
    with pytest.raises(T5ForgeError, match="the decode results were measured on a shared CPU"):
        report.results_block([result])
    rows = report.rows(result)
    assert all(row[-1].endswith("(shared CPU)") for row in rows)
    assert "4.00x (shared CPU)" in report.results_block([result], allow_shared=True)


def test_write_docs_replaces_only_the_marked_block(tmp_path, monkeypatch, capsys):
    _benchmark(tmp_path, monkeypatch, load=2.5).finish()
    page = tmp_path / "benchmarks.md"
    original = (
        f"# t5forge\n\n## How it compares\n\n{report.BLOCK_START}\nold sentence\n"
        f"{report.BLOCK_END}\n\n| feature table | stays |\n"
    )
    page.write_text(original)
    argv = ["--results_dir", str(tmp_path / "results"), "--page", str(page), "--write-docs"]
    assert report.main(argv) == 1
    assert "error: " in capsys.readouterr().err and page.read_text() == original
    assert report.main([*argv, "--allow-shared"]) == 0
    written = page.read_text()
    assert "old sentence" not in written and "4.00x (shared CPU)" in written
    assert written.startswith("# t5forge\n\n## How it compares\n\n<!-- bench:start -->")
    assert written.endswith("<!-- bench:end -->\n\n| feature table | stays |\n")


def test_missing_markers_and_missing_results_are_one_line_errors():
    with pytest.raises(T5ForgeError, match="no <!-- bench:start -->"):
        report.replace_block("# A page without markers\n", "block")
    with pytest.raises(T5ForgeError, match="run `make bench` first"):
        report.results_block([])


def test_benchmarks_page_has_one_bench_block():
    text = report.BENCHMARKS_PAGE.read_text()
    assert text.count(report.BLOCK_START) == text.count(report.BLOCK_END) == 1
    compares = text.index("## How it compares")
    assert compares < text.index(report.BLOCK_START) < text.index(report.BLOCK_END)


def test_latency_rows_show_milliseconds_of_the_median():
    side = {"median_s": 0.05, "throughput": 80.0, "unit": "new tokens/s"}
    peer = {"median_s": 0.2, "throughput": 20.0, "unit": "new tokens/s"}
    result = {
        "name": "decode",
        "shared_cpu": False,
        "sides": {"ours": side, "peer": peer},
        "comparisons": [
            {
                "row": "batch-1 greedy latency",
                "ours": "ours",
                "peer": "peer",
                "peer_label": "transformers",
                "metric": "latency",
                "ratio": 4.0,
            }
        ],
    }
    assert report.rows(result) == [
        [
            "batch-1 greedy latency (`benchmarks/decode.py`)",
            "50.0 ms",
            "transformers 200.0 ms",
            "4.00x",
        ]
    ]


def test_report_shows_a_load_tests_p99_latency_and_a_missing_peer_in_its_metric():
    continuous = {"p99_ms": 1657.0, "throughput": 15.9, "unit": "requests/s"}
    static = {"p99_ms": 4799.0, "throughput": 15.4, "unit": "requests/s"}
    bench = harness.Benchmark("serve_load", {})
    bench.sides.update(continuous=continuous, static=static)
    bench.compare("demo, 16 requests/s, p99 latency", "continuous", "static", "p99_ms", "static")
    bench.peer_missing("demo, 16 requests/s, p99 latency", "continuous", "ct2", "pip it", "p99_ms")
    result = {"name": "serve_load", "shared_cpu": False, "sides": bench.sides}
    assert report.rows({**result, "comparisons": bench.comparisons}) == [
        [
            "demo, 16 requests/s, p99 latency (`benchmarks/serve_load.py`)",
            "p99 1,657 ms",
            "static p99 4,799 ms",
            "2.90x",
        ],
        [
            "demo, 16 requests/s, p99 latency (`benchmarks/serve_load.py`)",
            "p99 1,657 ms",
            "ct2: pip it",
            "n/a",
        ],
    ]


def test_a_side_with_its_own_cpu_clock_is_charged_by_it():
    ticks = iter(range(0, 100, 10))

    def side():
        return "out"

    side.cpu_seconds = lambda: float(next(ticks))
    samples = harness.time_interleaved({"side": side}, repeats=2, warmup=0)
    assert samples["side"].cpu_seconds == [10.0, 10.0]
    assert samples["side"].output == "out"


def test_isolated_side_runs_in_a_worker_process_and_reports_its_failures(monkeypatch):
    tests_dir = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", tests_dir)
    side = IsolatedSide("isolated_sides:worker_pid_and_sum")
    try:
        pid, total = side(a=2, b=3)
        assert pid == side.process.pid != os.getpid() and total == 5
        call = side.bind(a=1, b=1)
        assert call()[1] == 2 and call.cpu_seconds() >= 0.0
        with pytest.raises(RuntimeError, match="TypeError"):
            side(a=1)  # the worker survives a failing call
        assert side(a=4, b=4)[1] == 8
    finally:
        side.close()
    assert side.process.returncode == 0
    with pytest.raises(RuntimeError, match="ValueError: no model here"):
        IsolatedSide("isolated_sides:broken")


def test_profile_top_ops_sums_by_op_and_leaves_out_python(tmp_path):
    import gzip

    from profile_decode import top_ops

    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:python"}},
        {"ph": "X", "pid": 1, "name": "fusion.1", "dur": 1500},
        {"ph": "X", "pid": 1, "name": "fusion.1", "dur": 500},
        {"ph": "X", "pid": 1, "name": "gemm", "dur": 3000},
        {"ph": "X", "pid": 2, "name": "generate", "dur": 90000},
        {"ph": "i", "pid": 1, "name": "marker"},
    ]
    trace = tmp_path / "perfetto_trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert top_ops(trace, 5) == [
        ("/device:GPU:0", "gemm", 3.0, 1),
        ("/device:GPU:0", "fusion.1", 2.0, 2),
    ]


def test_the_commit_named_in_the_environment_wins_even_inside_git(monkeypatch, tmp_path):
    """A lent GPU machine's copy of the tree has a git HEAD of its own: the commit the session
    names is the one its results belong to; without it, outside git, 'unknown'."""
    monkeypatch.setattr(harness, "REPO", tmp_path)
    monkeypatch.delenv("T5FORGE_BENCH_COMMIT", raising=False)
    assert harness.git_commit() == ("unknown", False)
    monkeypatch.setenv("T5FORGE_BENCH_COMMIT", "adcd489")
    assert harness.git_commit() == ("adcd489", False)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "model.py").write_text("x = 1\n")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first"],
        cwd=tmp_path,
        check=True,
    )
    assert harness.git_commit() == ("adcd489", False)


def test_earlier_benchmark_results_do_not_make_the_tree_dirty(monkeypatch, tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "decode.json").write_text("{}")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    monkeypatch.setattr(harness, "REPO", tmp_path)
    monkeypatch.delenv("T5FORGE_BENCH_COMMIT", raising=False)
    (tmp_path / "benchmarks" / "results" / "decode.json").write_text('{"new": 1}')
    assert harness.git_commit()[1] is False
    (tmp_path / "model.py").write_text("x = 2\n")
    assert harness.git_commit()[1] is True
