"""A throwaway single-node SLURM cluster for the tests, started and stopped by the test itself.

``slurm_cluster()`` writes ``slurm.conf`` and ``gres.conf`` into a temporary folder, starts
``munged`` (with its own key and socket), ``slurmctld`` and ``slurmd`` with their PID files,
state and logs in that folder, points ``SLURM_CONF`` at it and waits until the node is idle. On
exit it cancels what is left in the queue, stops every daemon by its PID file and checks that
each is gone. Nothing is written outside the folder.

The daemons run as whoever runs the tests, and so do the jobs: no root needed. The node is a
scheduling fake: it declares ``cpus`` CPUs and ``memory_mb`` of memory (slurmd believes the
configuration, ``SlurmdParameters=config_overrides``, and nothing is enforced: no cgroups) and
one GPU backed by ``/dev/null``. A job that asks for ``--gpus=1`` gets
``CUDA_VISIBLE_DEVICES=0`` and such jobs queue behind each other. There is no accounting
database: ``MinJobAge`` keeps finished jobs in ``slurmctld`` (``squeue --states=all``,
``scontrol show job``) for an hour, so the executor plugin must poll with ``squeue``.

Needs Debian's ``slurmctld slurmd slurm-client munge`` and the ``snakemake-executor-plugin-slurm``
package. ``require_slurm()`` skips a test when something is missing, and fails it instead when
``CI`` is set: CI must run the real thing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
PLUGIN = "snakemake_executor_plugin_slurm"
PARTITION = "batchscope"
CLUSTER_NAME = "batchscope-test"
MIN_JOB_AGE_S = 3600


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def missing_requirements() -> list[str]:
    """What this machine lacks to start the cluster and submit to it, in words (empty: ready)."""
    missing = [f"`{name}`" for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if importlib.util.find_spec(PLUGIN) is None:
        missing.append("the Python package snakemake-executor-plugin-slurm")
    return missing


def require_slurm() -> None:
    """Skip the calling test when SLURM cannot run here; under CI, fail it instead."""
    missing = missing_requirements()
    if not missing:
        return
    reason = (
        "a local SLURM cluster needs " + ", ".join(missing) + " (apt-get install slurmctld "
        'slurmd slurm-client munge; pip install -e ".[slurm]")'
    )
    if in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def run_killable(
    cmd: Sequence[str], *, timeout: float, **kwargs
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own session; past ``timeout`` s SIGKILL it and all it started.

    Raises ``subprocess.TimeoutExpired`` (with what it printed so far) after the kill.
    """
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # something outside the group holds the pipes
                out, err = "", ""
            raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@dataclass
class Cluster:
    """A running test cluster: its folder, the environment that reaches it, and a job query."""

    root: Path
    node: str
    partition: str
    env: dict[str, str] = field(repr=False)

    def run(self, *args: str, timeout: float = 30) -> str:
        """Run a SLURM client command against this cluster; its stdout (raises on failure)."""
        done = run_killable(list(args), timeout=timeout, env=self.env)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld still knows (running or finished within MinJobAge), as
        ``scontrol show job`` key=value pairs, oldest first."""
        out = self.run("scontrol", "--oneliner", "--details", "show", "job")
        jobs = [_key_values(line) for line in out.splitlines() if line.startswith("JobId=")]
        return sorted(jobs, key=lambda job: int(job["JobId"]))

    def logs(self) -> str:
        """The tail of each daemon's log, for a failure message."""
        parts = []
        for path in sorted([*self.root.glob("log/*.log"), *self.root.glob("munge/*.log")]):
            lines = path.read_text(errors="replace").splitlines()[-30:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)


def _key_values(line: str) -> dict[str, str]:
    """``Key=value Key2=value two`` -> dict; a value may contain spaces (``Command=...``)."""
    pairs: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        name, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][\w:/]*", name):
            key = name
            pairs[key] = value
        elif key is not None:
            pairs[key] += " " + token
    return {name: value.strip() for name, value in pairs.items()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_config(root: Path, node: str, cpus: int, memory_mb: int) -> Path:
    user = pwd.getpwuid(os.geteuid()).pw_name  # the daemons run as whoever runs the tests
    ctld_port = d_port = _free_port()
    while d_port == ctld_port:
        d_port = _free_port()
    conf = root / "slurm.conf"
    conf.write_text(
        f"""\
# Written by tests/slurm_cluster.py: a one-node cluster in {root}
ClusterName={CLUSTER_NAME}
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={root}/plugstack.conf
MpiDefault=none
MailProg=/bin/true
# no cgroups: processes are tracked by their parent, nothing is confined
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# no accounting database: finished jobs stay visible to squeue/scontrol for MinJobAge seconds
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge={MIN_JOB_AGE_S}
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# without a default, a job that names no memory takes the whole node
DefMemPerCPU=500
GresTypes=gpu
ReturnToService=2
# believe the node's size as written here, whatever the machine has
SlurmdParameters=config_overrides
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} Gres=gpu:1 State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""
    )
    # The fake GPU: SLURM wants a device file for it; jobs never open it.
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File=/dev/null\n")
    (root / "plugstack.conf").write_text("")
    # snakemake-executor-plugin-slurm-jobstep (0.6.1) removes every SLURM_* variable but the
    # job's identity before its `srun`, SLURM_CONF included: without /etc/slurm/slurm.conf that
    # srun finds no cluster. This `srun`, first on PATH, puts it back.
    srun = root / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text(f'#!/bin/sh\nSLURM_CONF={conf} exec {shutil.which("srun")} "$@"\n')
    srun.chmod(0o755)
    return conf


def _start_munge(root: Path) -> None:
    """munged with a fresh key, socket and PID file under ``root/munge``."""
    munge = root / "munge"
    munge.mkdir()
    munge.chmod(0o755)  # munged insists that every user can reach its socket
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    subprocess.run(
        [
            "munged",
            f"--key-file={key}",
            f"--socket={munge}/munge.socket",
            f"--pid-file={munge}/munged.pid",
            f"--log-file={munge}/munged.log",
            f"--seed-file={munge}/munged.seed",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _pid_files(root: Path) -> list[Path]:
    """Stop order: the node daemon, then the controller, then munge."""
    return [
        root / "run" / "slurmd.pid",
        root / "run" / "slurmctld.pid",
        root / "munge" / "munged.pid",
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of ours is gone for every purpose here
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
            return False
    return True


def _read_pid(pid_file: Path) -> int | None:
    with contextlib.suppress(OSError):
        text = pid_file.read_text().strip()
        if text.isdigit():
            return int(text)
    return None


def _stop(pid_file: Path, grace_s: float = 15) -> int | None:
    """SIGTERM the daemon named in ``pid_file``, SIGKILL it after ``grace_s``; its PID."""
    pid = _read_pid(pid_file)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    return pid


@contextlib.contextmanager
def slurm_cluster(
    *, cpus: int = 8, memory_mb: int = 64000, start_timeout_s: float = 60
) -> Iterator[Cluster]:
    """Start a one-node cluster (see the module's doc); yield it; stop it and remove its folder."""
    node = socket.gethostname().split(".")[0]
    # Not under pytest's tmp_path (0700): munged wants every folder above its socket open to all.
    root = Path(tempfile.mkdtemp(prefix="batchscope-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "spool", "run", "log"):
        (root / sub).mkdir()
    conf = _write_config(root, node, cpus, memory_mb)
    path = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": path}
    # Anything a surrounding SLURM job or user setting would add to sbatch/squeue calls.
    for name in list(env):
        if name.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_")) and name != "SLURM_CONF":
            del env[name]
    cluster = Cluster(root=root, node=node, partition=PARTITION, env=env)
    saved_conf = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        try:
            _start_munge(root)
            subprocess.run(["slurmctld"], env=env, check=True, capture_output=True, timeout=30)
            subprocess.run(["slurmd"], env=env, check=True, capture_output=True, timeout=30)
            _wait_idle(cluster, start_timeout_s)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            stderr = getattr(error, "stderr", None) or b""
            raise RuntimeError(
                f"could not start the test SLURM cluster: {error} {stderr.decode(errors='replace')}"
                f"\n{cluster.logs()}"
            ) from error
        yield cluster
    finally:
        if saved_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved_conf
        _shutdown(cluster)


def _wait_idle(cluster: Cluster, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        for pid_file in _pid_files(cluster.root):
            pid = _read_pid(pid_file)  # None: not written yet
            if pid is not None and not _alive(pid):
                raise RuntimeError(f"{pid_file.stem} stopped")
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            state = cluster.run("sinfo", "--noheader", "--format=%t", timeout=10).strip()
            if state == "idle":
                return
        time.sleep(0.3)
    raise RuntimeError(f"the test node did not become idle in {timeout_s:.0f} s (sinfo: {state!r})")


def _shutdown(cluster: Cluster) -> None:
    """Cancel leftover jobs, stop every daemon by its PID file, check they are gone, clean up."""
    with contextlib.suppress(Exception):
        cluster.run("scancel", f"--partition={cluster.partition}", timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not cluster.run("squeue", "--noheader", "--states=RUNNING,COMPLETING", timeout=10):
                break
            time.sleep(0.5)
    survivors = []
    for pid_file in _pid_files(cluster.root):
        pid = _stop(pid_file)
        if pid is not None and _alive(pid):
            survivors.append(f"{pid_file.stem} (pid {pid})")
    logs = cluster.logs()
    shutil.rmtree(cluster.root, ignore_errors=True)
    if survivors:
        raise RuntimeError(f"SLURM test daemons still running: {', '.join(survivors)}\n{logs}")
