"""A job forked from a warm interpreter (batchscope.bench.launch, batchscope.bench.warm) is the
job a fresh process would be: its folder, environment, streams and exit status, a signal sent
to it, a kill that takes it down, and the memory it reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from batchscope.bench import launch

#: A module the tests launch: it reports what it sees, then does what its first argument says.
PROBE = """
import json, os, sys, time
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                  "argv": sys.argv[1:],
                  "launch": os.environ.get("BATCHSCOPE_LAUNCH"), "mark": os.environ.get("MARK"),
                  "umask": os.umask(0o22)}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "sleep":
    time.sleep(120)
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("warm")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "probe.py").write_text(textwrap.dedent(PROBE))
    return tmp_path


def env_for(runtime: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.pop(launch.LAUNCH_ENV, None)
    return {**env, launch.DIR_ENV: str(runtime), launch.IDLE_ENV: "20", **extra}


def client(
    folder: Path, runtime: Path, *args: str, mode="warm", group=None, **extra
) -> subprocess.Popen:
    grouped = [] if group is None else ["--fork-group", group]
    cmd = [sys.executable, "-m", "batchscope.bench.launch", "--launch", mode, *grouped, "probe"]
    cmd += args
    out, err = (folder / "out.txt").open("w"), (folder / "err.txt").open("w")
    with out, err:
        return subprocess.Popen(
            cmd, cwd=folder, env=env_for(runtime, **extra), stdout=out, stderr=err
        )


def seen(folder: Path, timeout_s: float = 120) -> dict:
    """What the probe printed, once it has."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = (folder / "out.txt").read_text()
        if text.endswith("\n"):
            return json.loads(text.splitlines()[0])
        time.sleep(0.05)
    raise AssertionError(f"the probe printed nothing: {(folder / 'err.txt').read_text()}")


def gone(pid: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_job_has_the_clients_folder_environment_streams_and_exit_status(folder, runtime):
    old = os.umask(0o027)
    try:
        done = client(folder, runtime, "exit", "3", MARK="a")
    finally:
        os.umask(old)
    assert done.wait(120) == 3
    got = seen(folder)
    assert got["pid"] != done.pid
    assert got["launch"] == f"forked:{got['pid']}"
    assert got["cwd"] == str(folder) and got["argv"] == ["exit", "3"] and got["mark"] == "a"
    assert got["umask"] == 0o027
    assert (folder / "err.txt").read_text() == "to stderr\n"


def test_jobs_of_one_environment_share_an_interpreter_and_another_gets_its_own(folder, runtime):
    parents = []
    for mark in ("b", "b", "c"):
        assert client(folder, runtime, "exit", "0", MARK=mark).wait(120) == 0
        parents.append(seen(folder)["ppid"])
    assert parents[0] == parents[1] != parents[2]


def test_each_fork_group_gets_its_own_interpreter(folder, runtime):
    """Children of one interpreter share its address-space layout, which moves a point's
    speed: the bench rule gives each round its own interpreter, so that a point's runs in
    different rounds are independent. Same environment, other group: another parent."""
    parents = []
    for group in ("round1", "round1", "round2"):
        assert client(folder, runtime, "exit", "0", group=group).wait(120) == 0
        parents.append(seen(folder)["ppid"])
    assert parents[0] == parents[1] != parents[2]


def test_the_bench_rule_forks_each_round_from_its_own_interpreter():
    rules = (Path(__file__).parents[2] / "workflow" / "rules" / "bench.smk").read_text()
    bench = rules.split("rule bench:")[1].split("\nrule ")[0]
    assert "--fork-group round{wildcards.round}" in bench


def test_an_idle_interpreter_ends_without_the_interpreters_teardown(
    folder, tmp_path, tmp_path_factory
):
    """A warm interpreter ends on its idle timeout while the next round's runs measure; with
    torch loaded the interpreter's teardown (atexit, module clean-up) costs about 1.5
    CPU-seconds, which those runs would pay. A sitecustomize registers an atexit hook in it:
    the hook must not run, and the interpreter must still have ended (its socket gone)."""
    hooks = tmp_path / "site"
    hooks.mkdir()
    marker = tmp_path / "teardown-ran"
    (hooks / "sitecustomize.py").write_text(
        "import atexit, sys\n"
        "def hook():\n"  # by exit time, `-m` has put the module's file in sys.argv[0]
        "    if sys.argv[0].endswith('warm.py'):\n"
        f"        open({str(marker)!r}, 'w').close()\n"
        "atexit.register(hook)\n"
    )
    runtime = tmp_path_factory.mktemp("idle")  # a short path: a socket's is limited
    path = os.pathsep.join([str(hooks), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = client(folder, runtime, "exit", "0", PYTHONPATH=path, **{launch.IDLE_ENV: "1"})
    assert done.wait(120) == 0
    parent = seen(folder)["ppid"]
    assert ended(parent, timeout_s=60)
    assert not list(runtime.rglob("*.sock"))
    assert not marker.exists()


def ended(pid: int, timeout_s: float) -> bool:
    """Gone, or a zombie: it has run its last instruction (who reaps it is not its doing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_kill_9_of_the_client_takes_the_job_with_it(folder, runtime):
    running = client(folder, runtime, "sleep", "0")
    job = seen(folder)["pid"]
    running.send_signal(signal.SIGKILL)
    running.wait(30)
    assert gone(job)


def test_sigterm_to_the_client_reaches_the_job_and_the_client_dies_of_it(folder, runtime):
    running = client(folder, runtime, "sleep", "0")
    job = seen(folder)["pid"]
    running.send_signal(signal.SIGTERM)
    assert running.wait(30) == -signal.SIGTERM
    assert gone(job)


def test_under_slurm_or_when_asked_the_job_is_the_client_process_itself(folder, runtime):
    for mode, extra in (("warm", {"SLURM_JOB_ID": "7"}), ("fresh", {})):
        done = client(folder, runtime, "exit", "0", mode=mode, **extra)
        assert done.wait(120) == 0
        got = seen(folder)
        assert got["pid"] == done.pid and got["launch"] is None


def test_no_warm_interpreter_is_one_line_and_the_job_runs_fresh(folder, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    done = client(folder, blocked, "exit", "0")
    assert done.wait(120) == 0
    assert seen(folder)["pid"] == done.pid
    first = (folder / "err.txt").read_text().splitlines()[0]
    assert first.startswith("batchscope launch: starting the job fresh:") and "a-file" in first


def test_the_key_follows_the_environment_and_the_code_but_not_the_folder(tmp_path, monkeypatch):
    rest = [entry for entry in sys.path if entry not in (os.getcwd(), str(tmp_path))]
    monkeypatch.setattr(sys, "path", [os.getcwd(), *rest])  # as `python -m` starts
    before = launch.key()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *rest])
    monkeypatch.setenv("PWD", str(tmp_path))
    assert launch.key() == before
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert launch.key() != before
    monkeypatch.delenv("OMP_NUM_THREADS")
    source = Path(launch.__file__)
    stat = source.stat()
    try:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert launch.key() != before
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_forked_job_measures_the_memory_a_fresh_one_does(tmp_path, runtime):
    """A fork maps library pages lazily: without mapping again what the import left resident,
    the same job's ``peak_mem_mb`` read ~270 MB lower forked than fresh here."""
    from tests.factories import make_spec, settings

    spec = make_spec(
        "train",
        batch_size=16,
        dataset={"name": "synthetic", "channels": 1, "image_size": 16, "num_samples": 256},
        **settings("train", max_steps=8),
    )
    (tmp_path / "spec.json").write_text(spec.to_json())
    results = {}
    for mode in ("fresh", "warm"):
        out = tmp_path / mode
        cmd = [sys.executable, "-m", "batchscope.bench.launch", "--launch", mode]
        cmd += ["batchscope.bench", "spec.json", "--threads", "1", "--output", f"{out}.json"]
        cmd += ["--steps", f"{out}.steps.csv"]
        done = subprocess.run(cmd, cwd=tmp_path, env=env_for(runtime), capture_output=True)
        assert done.returncode == 0, done.stderr[-2000:]
        results[mode] = json.loads(Path(f"{out}.json").read_text())
    fresh, forked = results["fresh"], results["warm"]
    assert (fresh["launch"], forked["launch"]) == ("fresh", "forked")
    assert forked["peak_mem_mb"] == pytest.approx(fresh["peak_mem_mb"], rel=0.05)


def test_a_warm_interpreter_that_loaded_the_cuda_driver_forks_nothing(tmp_path, monkeypatch):
    from batchscope.bench import warm

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libtorch_cpu.so\n")
    monkeypatch.setattr(warm, "MAPS", str(maps))
    assert warm.cuda_touched() is None
    maps.write_text(maps.read_text() + "7f20-7f30 r-xp 00000000 08:01 2 /usr/lib/libcuda.so.1\n")
    assert "CUDA driver" in warm.cuda_touched()


def test_the_schemas_launch_values_are_the_clients():
    from batchscope.core import config

    schema = config.load_schema(config.SCHEMA_PATH)
    assert tuple(schema["properties"]["sweep"]["properties"]["launch"]["enum"]) == launch.LAUNCHES
