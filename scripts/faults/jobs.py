"""Faults that hit a running benchmark job or Snakemake itself, on a copy of the base sweep
with the result of one point removed (the job that is running when the fault hits): kill -9 of
that job, SIGTERM to Snakemake and its job (a scheduler's time limit), a diverging loss, a full
disk while the result is written, and a second ``snakemake`` started on the same folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil

from batchscope.core import paths
from faults.harness import READS_ANSWER, Row, Run, Suite, observe

#: A learning rate no small CNN survives: the loss is not finite within a few steps.
DIVERGING_LR = 1.0e30


def spec_of(point: str) -> str:
    """The run spec a point's job is started with (the needle to find its process by)."""
    return paths.spec_of(point.removesuffix(".json"))


def kill_job(suite: Suite) -> Row:
    folder = suite.copy("single", "kill-job")
    point = folder.drop("train", 16)

    def fault() -> Run:
        running = folder.start("--cores", "2")
        running.job(spec_of(point)).send_signal(signal.SIGKILL)
        return running.wait()

    return observe("kill -9 of a running bench job", folder, fault, points=[point])


def time_limit(suite: Suite) -> Row:
    folder = suite.copy("single", "sigterm")
    point = folder.drop("train", 16)

    def fault() -> Run:
        running = folder.start("--cores", "2")
        running.job(spec_of(point))
        running.signal_group(signal.SIGTERM)  # every process of the allocation, as SLURM does
        return running.wait()

    title = "SIGTERM to Snakemake and its running job (a time limit)"
    return observe(title, folder, fault, points=[point])


def nan_loss(suite: Suite) -> Row:
    """The user sets a learning rate that diverges: the training points are run again (their
    spec changed) and end ``diverged``, a result; the inference points are untouched."""
    folder = suite.copy("single", "nan-loss")
    config = suite.config("single")
    config["train"] = {**config["train"], "lr": DIVERGING_LR}
    folder.write_config(config)
    points = [folder.point("train", batch) for batch in (8, 16)]

    return observe(
        f"NaN loss (train.lr: {DIVERGING_LR:g})", folder, lambda: folder.run("--cores", "2"),
        points=points, sees=lambda run: folder.answer_line(r"diverg"), how=READS_ANSWER,
    )  # fmt: skip


@contextlib.contextmanager
def nearly_full(folder: Path, free_bytes: int = 4096) -> Iterator[str]:
    """``folder`` on a 64 KiB tmpfs holding its files and ``free_bytes`` free (one page: the
    steps CSV fits, the result after it does not); afterwards the folder holds what the run left
    on it. Yields how the disk was filled."""
    stash = folder.with_name(folder.name + ".stash")
    shutil.copytree(folder, stash)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True,
                   capture_output=True)  # fmt: skip
    try:
        shutil.copytree(stash, folder, dirs_exist_ok=True)
        stat = os.statvfs(folder)
        (folder / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - free_bytes))
        yield f"a 64 KiB tmpfs mounted on {folder.name}/ with {free_bytes} bytes free"
    finally:
        (folder / "filler").unlink(missing_ok=True)
        shutil.rmtree(stash)
        shutil.copytree(folder, stash)
        subprocess.run(["umount", str(folder)], check=True)
        for old in folder.iterdir():
            old.unlink()
        shutil.copytree(stash, folder, dirs_exist_ok=True)
        shutil.rmtree(stash)


def can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


def full_disk(suite: Suite) -> Row:
    """The disk fills while the result is written: a small tmpfs where mounting is allowed
    (root), else RLIMIT_FSIZE on the job (its writes beyond 1 KiB fail with EFBIG)."""
    folder = suite.copy("single", "full-disk")
    point = folder.drop("infer", 16)
    how = []

    def fault() -> Run:
        if can_mount():
            with nearly_full(folder.path / Path(point).parent) as done:
                how.append(done)
                return folder.run("--cores", "2")
        running = folder.start("--cores", "2")
        running.job(spec_of(point)).rlimit(psutil.RLIMIT_FSIZE, (1024, 1024))
        how.append("RLIMIT_FSIZE of 1 KiB on the job (its writes beyond fail with EFBIG)")
        return running.wait()

    row = observe("disk full while the result is written", folder, fault, points=[point])
    row.how = how[0] if how else ""
    return row


def second_snakemake(suite: Suite) -> Row:
    """A second ``snakemake`` on a folder where one is running: it must stop at the lock, and
    the first must finish as if alone."""
    folder = suite.copy("single", "second-snakemake")
    point = folder.drop("train", 16)
    first: list[Run] = []

    def fault() -> Run:
        running = folder.start("--cores", "2")
        running.job(spec_of(point))  # the first is running a job: it holds the lock
        second = folder.run("--cores", "2")
        first.append(running.wait())
        return second

    row = observe("a second snakemake on the same folder", folder, fault, points=[point])
    row.how = f"the first snakemake exits {first[0].returncode}" if first else ""
    return row


#: The cases of this family, by the name ``--cases`` takes.
CASES = {
    "kill-job": kill_job,
    "sigterm": time_limit,
    "nan-loss": nan_loss,
    "full-disk": full_disk,
    "second-snakemake": second_snakemake,
}
