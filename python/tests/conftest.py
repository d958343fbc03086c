"""Fixtures of the deepinfer package tests: the installed package (checked against the
sources it was built from), the tiny golden checkpoint, the CLI to compare with."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
TINY = SHARED / "golden" / "tiny-v4-c"
CHAT_DATA = REPO / "tests" / "data" / "chat"


def pytest_addoption(parser):
    parser.addoption("--deepinfer-cli", default=None,
                     help="the deepinfer executable to compare with (default: build/deepinfer; "
                          "its tests are skipped when it is missing and this option is not given)")


def _newest_source_mtime() -> float:
    newest = 0.0
    # What the package is built from (the server, CLI and tests are not part of it).
    tops = [f"src/{d}" for d in ("core", "loader", "kernels", "model", "regex", "tokenizer", "kv", "engine")]
    for top in tops + ["include", "python/src", "python/deepinfer", "python/CMakeLists.txt", "pyproject.toml"]:
        p = REPO / top
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
        for f in files:
            newest = max(newest, f.stat().st_mtime)
    return newest


def pytest_sessionstart(session):
    # The tests import the installed package; one built from older sources would test the wrong code.
    import deepinfer
    from deepinfer import _core
    installed = min(pathlib.Path(_core.__file__).stat().st_mtime, pathlib.Path(deepinfer.__file__).stat().st_mtime)
    if installed < _newest_source_mtime():
        pytest.exit("the installed deepinfer package is older than its sources: reinstall it "
                    "(.venv/bin/python -m pip install --no-build-isolation --config-settings=build-dir=build-python .)",
                    returncode=1)


@pytest.fixture(scope="session")
def cli(request):
    path = request.config.getoption("--deepinfer-cli")
    if path is None:
        path = REPO / "build" / "deepinfer"
        if not path.exists():
            pytest.skip("no build/deepinfer to compare with")
    return str(path)


def run_cli(cli, *args, input_bytes=None):
    r = subprocess.run([cli, *map(str, args)], input=input_bytes, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


@pytest.fixture(scope="session")
def tiny_dir():
    d = TINY / "model"
    assert (d / "config.json").exists(), f"missing golden checkpoint {d}"
    return str(d)


@pytest.fixture(scope="session")
def tiny_sequences():
    import json
    return json.loads((TINY / "sequences.json").read_text())


# Small KV budgets: every fixture engine fits the CI machine many times over.
@pytest.fixture(scope="session")
def tiny_ref(tiny_dir):
    import deepinfer
    return deepinfer.LLM(tiny_dir, numerics="reference", threads=2, kv_memory="64M")


@pytest.fixture(scope="session")
def tiny_float(tiny_dir):
    import deepinfer
    return deepinfer.LLM(tiny_dir, numerics="float", threads=2, kv_memory="64M")


@pytest.fixture(scope="session")
def default_llm():
    import deepinfer
    return deepinfer.LLM(threads=2, kv_memory="256M")


def wait_for(predicate, polls=1000, interval_s=0.01):
    """Polls an eventually-true condition (the engine thread acts asynchronously)."""
    import time
    for _ in range(polls):
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def idle_stats(llm):
    """The engine's counters once nothing runs or waits. A request that has ended is counted
    before its last event reaches Python; one that was cancelled (an iterator dropped or
    closed) ends on the engine thread after Python let go of it, which is what this waits for."""
    assert wait_for(lambda: (lambda s: s["requests_running"] == 0 and s["requests_waiting"] == 0)(llm.stats()))
    return llm.stats()
