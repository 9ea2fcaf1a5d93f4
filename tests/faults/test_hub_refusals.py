"""Hub ids the hub cannot give: `t5forge convert --from hf --input org/name` refuses in one line,
writing nothing, when the id is not cached and downloads are off, and when the repository is
gated (huggingface_hub's real client against a 127.0.0.1 hub, tests/local_hub.py)."""

from commands import command_env, t5forge
from local_hub import hub_server

from .conftest import error_line


def _convert(repo_id: str, output, **env):
    argv = ["convert", "--from", "hf", "--to", "t5forge", "--input", repo_id, "--output", output]
    environment = command_env(**env)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        if name not in env:
            environment.pop(name, None)
    return t5forge(*argv, env=environment)


def test_an_id_neither_cached_nor_downloadable_is_one_line(tmp_path):
    cache = tmp_path / "hub"
    result = _convert("tiny-org/missing", tmp_path / "out", HF_HUB_CACHE=cache, HF_HUB_OFFLINE=1)
    line = error_line(result)
    assert line.startswith("error: tiny-org/missing is no local path, and as a hub id it is not")
    assert f"the Hugging Face cache {cache} and HF_HUB_OFFLINE=1 forbids downloading it" in line
    assert "`hf download tiny-org/missing`" in line
    assert not (tmp_path / "out").exists()


def test_a_gated_repository_is_one_line(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "config.json").write_text("{}")
    with hub_server({"tiny-org/gated": tmp_path / "files"}, gated={"tiny-org/gated"}) as url:
        result = _convert(
            "tiny-org/gated", tmp_path / "out", HF_HUB_CACHE=tmp_path / "hub", HF_ENDPOINT=url
        )
    line = error_line(result)
    assert line == (
        f"error: tiny-org/gated is a gated Hugging Face repository: accept its terms at "
        f"{url}/tiny-org/gated, log in with `hf auth login` (or set HF_TOKEN), and load it again"
    )
    assert not (tmp_path / "out").exists()
