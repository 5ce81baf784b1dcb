"""What every fault case shares: the small sweeps it starts from, and what it measures.

A case copies a finished base sweep (``Suite.copy``: ``cp -a``, so that Snakemake sees every
file as it was), usually removes the result of the one grid point the fault will hit (the job
that is running when it hits), injects the fault during ``snakemake --cores 2``, then reads:

- what the user sees: one line of the command's output (or of a file the case names);
- the status recorded for the points the fault hit: the result's ``status``, or for a point
  without a result what ``--config partial=True`` records (``failed`` with a log, ``missing``
  without: ``batchscope.report.summary.result_files.absent_result``);
- finished results lost: results of other points that existed before the fault and are gone or
  rewritten after it (must be 0);
- what a plain rerun redoes, once the cause is gone: the plan of ``snakemake -n`` (with
  ``--unlock`` first when a lock is left, as the README tells), its job table, and whether it
  would rewrite a result that existed after the fault or redo a set-up job (dataset, model
  check, environment) the fault did not touch (must be none).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
from sweeps import snakemake_command, subprocess_env

from batchscope.core import paths
from batchscope.report.summary import result_files
from tests.factories import NO_RACE
from tests.workflow.helpers import DEBIAN_FMNIST, finished_jobs, job_counts, write_config

#: How one case's sweep is measured: the fewest steps the config allows, one round, no race.
MEASURE = {"warmup_steps": 1, "repeats": 1, "min_steps": 2, "min_seconds": 0,
           "diagnostic_steps": 0, "rounds": 1, "ceiling": False}  # fmt: skip
#: The base sweep most cases copy: real Fashion-MNIST from a local mirror, both modes, two
#: batch sizes, no workers (``mirrors`` is filled in by ``Suite``).
SINGLE = {
    "dataset": {"name": "fashion_mnist"},
    "models": ["small_cnn"],
    "modes": ["train", "infer"],
    "batch_sizes": [8, 16],
    "num_workers": [0],
    "seeds": [0],
    "measure": MEASURE,
    "sweep": NO_RACE,
    "train": {"max_steps": 4, "validate": False},
    "infer": {"max_steps": 4},
}
#: The base of the two-process cases: one point on one device, the same on two (gloo on the
#: CPU, as tests/workflow/test_devices.py), under a CPU memory budget that both fit in.
DDP = {
    "dataset": {"name": "synthetic", "channels": 1, "image_size": 16, "num_samples": 512},
    "models": ["small_cnn"],
    "modes": ["train"],
    "batch_sizes": [8],
    "num_workers": [0],
    "devices": [1, 2],
    "seeds": [0],
    "device": "cpu",
    "cpu_memory_budget_mb": 2048,
    "measure": MEASURE,
    "sweep": NO_RACE,
    "train": {"max_steps": 4, "validate": False},
}
BASES = {"single": SINGLE, "ddp": DDP}

#: The jobs after the benchmarks, redone whenever a result is new: named together in the table.
AFTER = ("aggregate", "answer", "plots", "recommend", "all")
#: Set-up jobs: a fault on one grid point must not redo them.
SETUP = ("download_dataset", "capture_environment", "model_check", "models_checked")
#: What a dry run says when its plan waits on a checkpoint: Snakemake looks at the jobs after it
#: again once it has run, so the plan lists them all and the run may redo fewer.
PROVISIONAL = "DAG of jobs will be updated after completion"
#: Our own one-line errors, then Snakemake's: the line of the output a user reads first.
USER_LINES = (
    r"^batchscope[\w ]*: .*(error|died)",
    r"^batchscope: ",
    r"cannot be locked",
    r"^Error in rule",
)
WIDTH = 100
#: The answer a case reads what the user sees from, where no job failed (``Folder.answer_line``).
ANSWER = "results/recommendation.md"
READS_ANSWER = f"what the user reads: {ANSWER}"


def forked_job(client: psutil.Process, timeout_s: float = 120) -> psutil.Process:
    """The process that runs a launch client's job (batchscope.bench.launch): the child a warm
    interpreter forked for it (one of its children, in the client's folder, started after the
    client), or the client itself once it has become a fresh job (``exec``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if "batchscope.bench.launch" not in client.cmdline():
                return client  # started fresh: the same process, now the job
            cwd, since = client.cwd(), client.create_time()
        except psutil.Error:
            break
        for process in psutil.process_iter(["cmdline"]):
            if "batchscope.bench.warm" not in (process.info["cmdline"] or []):
                continue
            for child in process.children():
                try:
                    if child.cwd() == cwd and child.create_time() >= since:
                        return child
                except psutil.Error:
                    continue
        time.sleep(0.05)
    raise RuntimeError(f"the job of launch client {client.pid} did not start")


@dataclasses.dataclass
class Row:
    """One line of the table."""

    case: str
    sees: str
    status: str
    lost: int
    redoes: str
    unaffected: int  # jobs the rerun redid that the fault did not touch
    plan_ok: bool = True
    how: str = ""  # how the fault was injected, where the case name does not say

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.unaffected == 0 and self.plan_ok


@dataclasses.dataclass
class Run:
    """A finished ``snakemake`` command: its exit status and its output (stdout and stderr)."""

    returncode: int
    output: str


class Running:
    """A ``snakemake`` command started in its own session (so that its jobs can be found and the
    whole group signalled), its output going to a file."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path):
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def job(self, needle: str, timeout_s: float = 300) -> psutil.Process:
        """The job's process (``python -m batchscope.bench`` or one of its modules:
        ``batchscope.bench.model_check``, ...) whose command line names ``needle`` (its spec),
        once it has started."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                try:
                    cmd = child.cmdline()
                except psutil.Error:
                    continue
                module = cmd[2] if cmd[1:2] == ["-m"] and len(cmd) > 2 else ""
                ours = module == "batchscope.bench" or module.startswith("batchscope.bench.")
                if ours and any(needle in arg for arg in cmd):
                    return forked_job(child) if module == "batchscope.bench.launch" else child
            time.sleep(0.05)
        raise RuntimeError(f"no job of {needle} started (see {self.log})")

    def signal_group(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def wait(self, timeout_s: float = 900) -> Run:
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.process.wait()
        return Run(self.process.returncode, self.log.read_text(errors="replace"))


@dataclasses.dataclass
class Folder:
    """One case's working folder and its config file."""

    path: Path
    config: Path
    runs: int = 0  # the commands run so far (each one's output: <folder>.<n>.out)

    def cmd(self, *args: str) -> list[str]:
        return snakemake_command(self.path, None, self.config, args)

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        return {**subprocess_env(), **(extra or {})}

    def run(self, *args: str, env: dict[str, str] | None = None) -> Run:
        """Run ``snakemake *args`` to its end (its output also kept beside the folder)."""
        return self.start(*args, env=env).wait()

    def start(self, *args: str, env: dict[str, str] | None = None) -> Running:
        """Start ``snakemake *args``; its output goes to ``<folder>.<n>.out`` beside it."""
        self.runs += 1
        log = self.path.parent / f"{self.path.name}.{self.runs}.out"
        return Running(self.cmd(*args), self._env(env), log)

    def results(self) -> dict[str, int]:
        """Every result under ``results/runs`` (relative path -> mtime in ns)."""
        return {
            p.relative_to(self.path).as_posix(): p.stat().st_mtime_ns
            for p in (self.path / "results" / "runs").rglob("*.json")
        }

    def point(self, mode: str, batch_size: int, devices: int = 1, model: str = "small_cnn") -> str:
        """The result of one grid point, relative to the folder."""
        stem = paths.run_stem(mode=mode, model=model, batch_size=batch_size, accumulation_steps=1,
                              num_workers=0, devices=devices, seed=0, round=1)  # fmt: skip
        return f"{stem}.json"

    def drop(self, mode: str, batch_size: int, devices: int = 1) -> str:
        """Remove one point's result and steps with the summary, as the README says to redo a
        point, so that the sweep runs it again; its result."""
        point = self.point(mode, batch_size, devices)
        (self.path / point).unlink()
        (self.path / result_files.steps_path(point)).unlink()
        (self.path / "results" / "summary.csv").unlink(missing_ok=True)
        return point

    def answer_line(self, pattern: str) -> str:
        """The line of the answer (``results/recommendation.md``) that says what ``pattern``
        finds, without its list mark: what the user reads where no job failed."""
        text = (self.path / ANSWER).read_text()
        return user_line(text, [pattern]).removeprefix("- ")

    def write_config(self, config: dict) -> None:
        self.config = write_config(self.path, **config)

    def status(self, points: Iterable[str]) -> str:
        """The statuses recorded for ``points`` (result paths), each once, in order."""
        found: list[str] = []
        for point in points:
            result = self.path / point
            if result.exists():
                status = json.loads(result.read_text())["status"]
            else:
                log = self.path / paths.log_of(point.removesuffix(".json"))
                status = result_files.absent_result(result, log)["status"]
            if status not in found:
                found.append(status)
        return ", ".join(found)


class Suite:
    """The suite's folder: a local mirror of Fashion-MNIST (links to Debian's files, which a
    case may break and must restore), the base sweeps, built once, and one copy per case."""

    def __init__(self, root: Path):
        self.root = root
        self.mirror = root / "mirror"
        self.bases: dict[str, Folder] = {}
        if not self.mirror.exists():
            self.mirror.mkdir(parents=True)
            for gz in sorted(DEBIAN_FMNIST.glob("*.gz")):
                (self.mirror / gz.name).symlink_to(gz)

    def config(self, name: str) -> dict:
        config = dict(BASES[name])
        if config["dataset"]["name"] == "fashion_mnist":
            config["dataset"] = {**config["dataset"], "mirrors": [f"{self.mirror}/"]}
        return config

    def base(self, name: str) -> Folder:
        """The finished base sweep ``name``: run now, or found finished in this suite's folder
        (``--workdir`` again)."""
        if name not in self.bases:
            folder = Folder(self.root / f"base-{name}", Path())
            folder.path.mkdir(exist_ok=True)
            folder.write_config(self.config(name))
            if not (folder.path / "results" / "summary.csv").exists():
                print(f"building the {name} base sweep in {folder.path}", file=sys.stderr)
                done = folder.run("--cores", "2")
                if done.returncode != 0:
                    tail = "\n".join(done.output.splitlines()[-30:])
                    raise SystemExit(f"{tail}\nthe {name} base sweep failed: {folder.path}")
            self.bases[name] = folder
        return self.bases[name]

    def copy(self, base: str, case: str) -> Folder:
        source = self.base(base)
        target = self.fresh(case)
        shutil.copytree(source.path, target, symlinks=True, dirs_exist_ok=True)
        return Folder(target, target / source.config.name)

    def fresh(self, case: str) -> Path:
        """An empty folder for the case (what an earlier run of it left, removed)."""
        target = self.root / case
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        return target


def user_line(text: str, patterns: Iterable[str] = USER_LINES) -> str:
    """The first line of ``text`` matching the first of ``patterns`` that any line matches
    (else its last non-empty line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern in patterns:
        hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        if hits:
            return failed_job(lines, hits[0])
    return lines[-1] if lines else ""


def failed_job(lines: list[str], at: int) -> str:
    """``lines[at]``; when that is Snakemake's ``Error in rule X:``, with what the job's log
    ends with (Snakemake prints it, ``show-failed-logs``), or that the log is empty."""
    if not lines[at].startswith("Error in rule"):
        return lines[at]
    block = lines[at + 1 :]
    logfile = next((i for i, line in enumerate(block) if line.startswith("Logfile ")), None)
    if logfile is None:
        return f"{lines[at]} (no log)"
    if block[logfile].endswith("empty file"):
        return f"{lines[at]} its log is empty"
    # the log, between two rules of '='
    shown = block[logfile + 2 :]
    end = next((i for i, line in enumerate(shown) if set(line) == {"="}), len(shown))
    return f"{lines[at]} {shown[end - 1]}" if end else lines[at]


def clip(line: str, root: Path | None = None) -> str:
    """``line`` on one line, without table rules, the suite's folder ``root`` and the middle of
    md5 digests, at most ``WIDTH`` characters: a longer one keeps its start and its end (where
    a message says why), the middle elided."""
    if root is not None:
        line = line.replace(f"{root}/", "")
    line = re.sub(r"\b([0-9a-f]{6})[0-9a-f]{26}\b", r"\1…", " ".join(line.split()))
    line = line.replace("|", "/")
    if len(line) <= WIDTH:
        return line
    head = WIDTH * 6 // 10
    return f"{line[:head]} … {line[head - WIDTH + 3 :]}"


def describe(counts: dict[str, int]) -> str:
    """A rerun's job table in words: ``1 download_dataset, 1 bench + 5 after``, or nothing."""
    rules = {rule: n for rule, n in counts.items() if rule != "total"}
    after = sum(rules.pop(rule, 0) for rule in AFTER)
    words = [f"{n} {rule}" for rule, n in rules.items()]
    text = ", ".join(words)
    if after:
        text = f"{text} + {after} after" if text else f"{after} after"
    return text or "nothing"


def planned_outputs(plan: str) -> set[str]:
    """Every output file of the jobs a dry run lists (its ``output:`` lines)."""
    found: set[str] = set()
    for line in plan.splitlines():
        if line.strip().startswith("output: "):
            found.update(line.strip().removeprefix("output: ").split(", "))
    return found


def rerun(folder: Folder, kept: dict[str, int], setup_touched: Iterable[str] = ()) -> Row:
    """What a plain rerun redoes: the plan of ``snakemake -n`` (``--unlock`` first when a lock
    was left, as the README tells), or, where that plan waits on a checkpoint, the rerun itself:
    ``redoes`` in words, and ``unaffected``, the jobs in it the fault did not touch (one that
    rewrites a result in ``kept``, its paths and mtimes, or a set-up job not in
    ``setup_touched``). The other fields are left for the case."""
    unlocked = any((folder.path / ".snakemake" / "locks").glob("*"))
    if unlocked:
        folder.run("--unlock")
    plan = folder.run("-n")
    counts = job_counts(plan.output) if "Job stats:" in plan.output else {}
    redone = planned_outputs(plan.output) & set(kept)
    listed: dict[str, int] = {}
    if plan.returncode == 0 and PROVISIONAL in plan.output:
        # the plan waits on a checkpoint: what the rerun redoes is known once it has run
        listed, counts = counts, finished_jobs(folder.run("--cores", "2").output)
        now = folder.results()
        redone = {path for path, mtime in kept.items() if now.get(path) != mtime}
    redoes = describe(counts)
    more = [f"{n} {r}" for r, n in listed.items() if r != "total" and n > counts.get(r, 0)]
    if more:
        redoes += f" (its dry run, waiting on a checkpoint, listed {', '.join(more)})"
    setup = [rule for rule in SETUP if counts.get(rule) and rule not in set(setup_touched)]
    redoes = ("after --unlock: " if unlocked else "") + redoes
    if plan.returncode != 0:
        redoes += f" (the plan failed: {clip(user_line(plan.output))})"
    unaffected = len(redone) + sum(counts[rule] for rule in setup)
    return Row("", "", "", 0, redoes, unaffected, plan_ok=plan.returncode == 0)


def observe(
    case: str,
    folder: Folder,
    fault: Callable[[], Run],
    *,
    points: list[str],
    sees: Callable[[Run], str] = lambda run: user_line(run.output),
    fix: Callable[[], None] | None = None,
    setup_touched: Iterable[str] = (),
    status: str | None = None,
    how: str = "",
) -> Row:
    """Run ``fault`` in ``folder`` and read its row: ``points`` are the results the fault hits
    (their status is recorded; they are not counted as lost); ``fix`` removes the cause before
    the rerun; ``status`` replaces the recorded one where no point is hit."""
    before = folder.results()
    seen = fault()
    after = folder.results()
    lost = sum(1 for p, mtime in before.items() if p not in points and after.get(p) != mtime)
    recorded = status if status is not None else folder.status(points)
    if fix is not None:
        fix()
    row = rerun(folder, after, setup_touched)
    line = clip(sees(seen), folder.path.parent)
    return dataclasses.replace(row, case=case, sees=line, status=recorded, lost=lost, how=how)
