"""``python -m batchscope.bench.launch [--launch warm|fresh] MODULE ARGS...``: start one job of a
bench module (``batchscope.bench``: a grid point or a ceiling) as ``python -m MODULE ARGS``
would, or forked from a warm interpreter.

A fresh job spends about 3 s of a 6 s round importing torch and torchvision before it measures
anything (``phase_startup_s``); the run-to-run spread the verdict pools lives between processes,
so a round buys its evidence with processes, and half of each one is the import. With
``--launch warm`` (``sweep.launch``, the default) this client, which imports nothing but the
standard library, asks a warm interpreter (``batchscope.bench.warm``: one per interpreter,
environment and code, started by the first job that needs it and ended when idle) to fork a
child that runs the module. The child is still a new process for each job: its own memory, its
own session, its own threads and seeds; it maps the library pages the import left resident, so
``peak_mem_mb`` means what it means in a fresh process (docs/results.md).

The client stands for the job towards Snakemake: the child's stdin, stdout and stderr are the
client's, SIGTERM, SIGINT and SIGHUP sent to the client go to the child, the client exits with
the child's status (or dies of its signal), and a client killed outright (``kill -9``) takes
the child with it. A job is started fresh instead (``os.execv``, the same process) where forking
is not the right model: under SLURM (a warm interpreter would outlive the job's allocation or
run in another's), off Linux, or when no warm interpreter can be reached (one line says why).
The result records which (``launch``).

**Fork groups.** The children of one warm interpreter are not independent draws of a fresh
process: they inherit its address-space layout (one ASLR draw, one heap), and a point's speed
depends on it. On the 2-core CPU, 7 December 2026 (``scripts/parent_effect.py``), training at
batch 256 measured a spread of 0.089 (sd of log samples_per_s) between children of one
interpreter and 0.151 between interpreters (F test p = 0.0007, 6 interpreters x 3 children):
a sweep whose every run of a point came from one interpreter measured that interpreter's luck
8 times and called it 8 runs. ``--fork-group`` (the bench rule passes the round) gives each
group its own interpreter, so a point's runs in different rounds come from different ones and
are independent again, as the verdict's model assumes; the interpreter a round's points share
is a round x point effect, in the model's residual.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from importlib import util
from pathlib import Path

#: sweep.launch: how a job's process starts.
LAUNCHES = ("warm", "fresh")
#: How the child records that it was forked (``launch`` in a result reads it).
LAUNCH_ENV = "BATCHSCOPE_LAUNCH"
#: Seconds a warm interpreter waits for another job before it ends.
IDLE_ENV = "BATCHSCOPE_WARM_IDLE_S"
IDLE_S = 60.0
#: Where warm interpreters listen (a folder of this user's; ``XDG_RUNTIME_DIR`` where set).
DIR_ENV = "BATCHSCOPE_WARM_DIR"
#: Seconds to wait for a warm interpreter to take a job (its imports included).
START_TIMEOUT_S = 120.0
#: Variables that differ between jobs of one sweep and that nothing the warm interpreter
#: imported has read: left out of its key.
VOLATILE_ENV = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "PYTEST_CURRENT_TEST", LAUNCH_ENV})
#: The signals passed on to the child: what a scheduler, a terminal or Snakemake sends.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
#: What a job's first line says when it could not be forked.
_FRESH = "batchscope launch: starting the job fresh:"


class Unavailable(Exception):
    """No warm interpreter took the job (before it started): run it fresh."""


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench.launch", description=__doc__.split("\n")[0]
    )
    p.add_argument("--launch", choices=LAUNCHES, default="warm")
    p.add_argument(
        "--fork-group",
        default="",
        help="jobs of one group are forked from one warm interpreter, another group's from"
        " another (the bench rule passes the round: see fork_group in the module docstring)",
    )
    p.add_argument("module", help="the module to run (batchscope.bench)")
    return p.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    if args.launch == "warm" and forkable():
        try:
            return run_warm(args.module, rest, args.fork_group)
        except Unavailable as error:
            print(f"{_FRESH} {error}", file=sys.stderr, flush=True)
    return exec_fresh(args.module, rest)


def forkable() -> bool:
    """Whether this job may be forked from a warm interpreter: on Linux, outside SLURM."""
    return sys.platform.startswith("linux") and not os.environ.get("SLURM_JOB_ID")


def exec_fresh(module: str, rest: list[str]) -> int:
    """Become ``python -m MODULE REST`` (this process, its pid and its session)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *rest])
    return 1  # not reached


# --- the key: which warm interpreter may run this job -----------------------------------------


def search_path() -> list[str]:
    """``sys.path`` with this folder, which ``python -m`` puts first, as a placeholder: the
    child puts its own folder back, and the key does not depend on where the job runs."""
    first = sys.path[:1]
    if first == [os.getcwd()]:
        first = ["."]
    return [*first, *sys.path[1:]]


def _stat(path: str | None) -> list:
    try:
        info = os.stat(path) if path else None
    except OSError:
        info = None
    return [path, info.st_mtime_ns, info.st_size] if info else [path]


def code_state() -> list:
    """Where batchscope, torch and torchvision are found and each file of batchscope as it is
    now (a changed file is a new key: no job runs code older than its files)."""
    import batchscope

    package = Path(batchscope.__file__).parent
    files = sorted(str(p) for p in package.rglob("*.py"))
    found = []
    for name in ("torch", "torchvision"):
        spec = util.find_spec(name)
        found.append(_stat(spec.origin if spec else None))
    return [*found, *map(_stat, files)]


def key(fork_group: str = "") -> str:
    """The warm interpreter this job may be forked from: the same interpreter, the same
    environment (less :data:`VOLATILE_ENV`), search path and code, and the same fork group."""
    env = {k: v for k, v in os.environ.items() if k not in VOLATILE_ENV}
    state = [sys.executable, sys.version, search_path(), sorted(env.items()), code_state()]
    if fork_group:
        state.append(fork_group)
    return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:20]


def runtime_dir() -> Path:
    base = os.environ.get(DIR_ENV) or os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    folder = Path(base) / f"batchscope-warm-{os.getuid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


# --- the job through a warm interpreter -------------------------------------------------------


def request() -> dict:
    """What the child needs to be this job: its folder, environment, search path, umask and
    resource limits (all as this process has them)."""
    import resource

    umask = os.umask(0)
    os.umask(umask)
    limits = {}
    for name in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE"):
        limits[name] = resource.getrlimit(getattr(resource, name))
    return {
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "path": search_path(),
        "umask": umask,
        "limits": limits,
    }


def connect(path: Path, deadline: float) -> socket.socket:
    """A connection to the warm interpreter at ``path``, starting one if none listens."""
    started = None
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(str(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
        if started is None or started.poll() is not None:
            started = start_server(path)
        if time.monotonic() > deadline:
            started.kill()
            raise Unavailable(f"no warm interpreter listened at {path} in time")
        time.sleep(0.05)


def start_server(path: Path) -> subprocess.Popen:
    """A warm interpreter for ``path`` in its own session, as this job's environment would
    start the job (the same interpreter, folder and variables); it ends itself when idle. A
    second one started meanwhile for the same key sees the first's lock and ends."""
    idle = os.environ.get(IDLE_ENV, str(IDLE_S))
    log = path.with_suffix(".log").open("ab")
    cmd = [sys.executable, "-m", "batchscope.bench.warm", str(path), "--idle-s", idle]
    with log:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def _receive(sock: socket.socket) -> dict | None:
    data = sock.recv(65536)
    return json.loads(data) if data else None


def run_warm(module: str, rest: list[str], fork_group: str = "") -> int:
    """Run the job in a child of the warm interpreter; its exit status."""
    sock, child = start_warm(module, rest, fork_group)
    for signum in FORWARDED:
        signal.signal(signum, lambda signum, frame: signal_job(child, signum))
    try:
        ended = _receive(sock)
    except OSError:
        ended = None
    if ended is None:  # the warm interpreter died under the job
        signal_job(child, signal.SIGKILL)
        print(
            f"batchscope launch: error: the warm interpreter ended while job {child} ran",
            file=sys.stderr,
        )
        return 1
    code = ended["exit"]
    if code < 0:  # the child died of a signal: so does the client, as a fresh job would
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def start_warm(module: str, rest: list[str], fork_group: str = "") -> tuple[socket.socket, int]:
    """The connection to the warm interpreter that has forked the job, and the job's pid;
    :class:`Unavailable` if none did (nothing of the job has run)."""
    message = json.dumps({**request(), "module": module, "argv": rest}).encode()
    try:
        path = runtime_dir() / f"{key(fork_group)}.sock"
        deadline = time.monotonic() + START_TIMEOUT_S
        for _ in range(3):  # an interpreter ending on its idle timeout as we connect: again
            sock = connect(path, deadline)
            try:
                socket.send_fds(sock, [message], [0, 1, 2])
                started = _receive(sock)
            except OSError:
                started = None
            if started is not None and "refused" in started:
                raise Unavailable(started["refused"])
            if started is not None:
                return sock, started["pid"]
            sock.close()
    except OSError as error:  # no folder for the socket, no interpreter to start
        raise Unavailable(str(error)) from error
    raise Unavailable(f"the warm interpreter at {path} took no job")


def signal_job(child: int, signum: int) -> None:
    """``signum`` to a forked job's session (its DataLoader workers too), or to the job alone
    before it has set its session up."""
    try:
        os.killpg(child, signum)  # the child leads its own session: its workers too
    except ProcessLookupError:  # not yet: the child alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)


if __name__ == "__main__":
    sys.exit(main())
