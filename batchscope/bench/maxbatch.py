"""Entry point: the largest batch size that fits one mode × model (``batch_sizes: auto``).

    python -m batchscope.bench.maxbatch --mode train --model small_cnn --dataset fashion_mnist \\
        --data-root resources/datasets/fashion_mnist --device auto --margin 0.1 \\
        --cap 65536 --output results/maxbatch/train/small_cnn.json

Every trial is a fresh ``python -m batchscope.bench`` process (an allocator failure, a CUDA
context in a bad state or a fragmented heap cannot carry over to the next trial) running one
warm-up step and ``--trial-steps`` measured steps; its result JSON says ``ok`` or ``oom`` and
its peak memory. :func:`batchscope.core.search.search` picks the sizes: doubling, then the memory
model's prediction, then bisection. The output JSON holds the limit, the grid to sweep (powers
of two up to the limit, plus the limit), the memory-vs-batch curve and every trial.

Where the memory comes from:

- **CPU**: the limit is a memory budget (``--cpu-memory-budget-mb``; without one, the memory
  the machine has available when the search starts). Each trial runs under the budget *less the
  margin* (bench's ``--cpu-memory-budget-mb``, enforced with ``RLIMIT_DATA``), so a batch that
  does not fit fails in the real allocator and the margin is enforced by it. The budget counts
  private memory mapped after the trial's set-up while ``peak_mem_mb`` is the resident set, so
  the two are not comparable; the search takes the wall from the failures' own readings.
- **CUDA** (and MPS): the capacity is ``--capacity-mb``, or the device's total memory, read by a
  short ``python`` subprocess before the first trial (torch never initialises CUDA in this
  process: a context held here would take memory from the trials). A trial fits only if its
  peak allocated memory is at most ``(1 - margin) × capacity``.
  ``peak_mem_mb`` does not count the CUDA context or the caching allocator's slack; the margin
  covers them.

Any option this command does not know (``--precision bf16``, ``--channels-last``,
``--optimizer adamw``, ...) is passed to every trial's bench unchanged: they change the memory.
A trial validates (training) at its own batch size unless ``--val-batch-size`` is given.
Synthetic data gets ``num_samples`` raised per trial to cover the trial's steps. A size larger
than a real dataset's split allows (bench: "gives N steps") counts as a failure
(``too_large_for_data``). Exits 0 with the result written, also when no size fits (``limit``:
null); a trial that crashes for another reason stops the search with one line and exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batchscope.core import results, search

_MB = 1024 * 1024

#: Bench's one-line error for a batch size that leaves no step to measure.
_NO_STEPS = "batchscope bench: error: batch_size"

#: Bench options each trial sets itself; passing them on would override the search's choice.
_SET_PER_TRIAL = ("--batch-size", "--max-steps", "--warmup-steps", "--output", "--steps")

#: Result keys of a trial worth keeping beside the search's own record.
_TRIAL_KEYS = (
    "error",
    "peak_rss_mb",
    "cuda_max_allocated_mb",
    "cuda_max_reserved_mb",
    "samples_per_s",
    "steps_run",
    "wall_s",
)

#: Run in a subprocess when the device is not the CPU: which device, and its memory.
_DEVICE_QUERY = """
import json, sys
import torch
from batchscope.bench.measure import DeviceError, resolve_device
try:
    device = resolve_device(sys.argv[1])
except DeviceError as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(0)
total = None
if device.type == "cuda":
    total = torch.cuda.get_device_properties(device).total_memory
elif device.type == "mps" and hasattr(torch.mps, "recommended_max_memory"):
    total = torch.mps.recommended_max_memory()
print(json.dumps({"device": str(device), "total_bytes": total}))
"""


class MaxBatchError(RuntimeError):
    """A trial or the device query failed for a reason other than memory; one line."""


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench.maxbatch",
        description=__doc__.split("\n")[0],
        epilog="Other options are passed to every trial's `python -m batchscope.bench`.",
        allow_abbrev=False,  # an abbreviation must not swallow one of bench's options
    )
    p.add_argument("--mode", choices=("train", "infer"), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--data-root", default=None)
    p.add_argument("--dataset-options", default="{}", help="JSON, as bench takes it")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per trial")
    p.add_argument("--threads", type=int, default=None, help="torch threads per trial")
    p.add_argument("--val-batch-size", type=int, default=None, help="default: the trial's size")
    p.add_argument("--capacity-mb", type=float, default=None, help="GPU: default its total")
    p.add_argument("--cpu-memory-budget-mb", type=float, default=None, help="CPU: the limit")
    p.add_argument("--margin", type=float, default=0.1, help="share of the memory kept free")
    p.add_argument("--cap", type=int, default=65536, help="largest batch size to try")
    p.add_argument("--start", type=int, default=1, help="first batch size to try")
    p.add_argument("--tolerance", type=float, default=0.05, help="relative, on the limit")
    p.add_argument("--trial-steps", type=int, default=2, help="measured steps per trial")
    p.add_argument("--trial-warmup-steps", type=int, default=1)
    p.add_argument("--max-trials", type=int, default=40)
    p.add_argument("--trial-timeout", type=float, default=1800.0, help="seconds per trial")
    p.add_argument("--trials-dir", default=None, help="keep each trial's files here")
    p.add_argument("--output", required=True, help="the search's result JSON")
    args, forwarded = p.parse_known_args(argv)
    taken = [arg for arg in forwarded if arg.split("=", 1)[0] in _SET_PER_TRIAL]
    if taken:
        p.error(f"{', '.join(taken)}: set per trial by maxbatch, not passed on to bench")
    if args.start < 1 or args.cap < args.start:
        p.error("need 1 <= --start <= --cap")
    if not 0.0 <= args.margin < 1.0:
        p.error("--margin must be in [0, 1)")
    if not 0.0 < args.tolerance < 1.0:
        p.error("--tolerance must be in (0, 1)")
    if args.trial_steps < 1 or args.trial_warmup_steps < 0 or args.max_trials < 1:
        p.error("--trial-steps and --max-trials must be at least 1, --trial-warmup-steps >= 0")
    for name in ("capacity_mb", "cpu_memory_budget_mb"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    try:
        options = json.loads(args.dataset_options)
    except json.JSONDecodeError as exc:
        p.error(f"--dataset-options is not JSON: {exc}")
    if not isinstance(options, dict):
        p.error("--dataset-options must be a JSON object")
    return args, forwarded


def main(argv: list[str] | None = None) -> int:
    args, forwarded = parse_args(argv)
    try:
        return _maxbatch(args, forwarded)
    except (MaxBatchError, search.SearchError) as exc:
        print(f"batchscope maxbatch: error: {exc}", file=sys.stderr)
        return 1


def _maxbatch(args: argparse.Namespace, forwarded: list[str]) -> int:
    started = time.perf_counter()
    memory = _memory_limits(args)
    log = f"batchscope maxbatch: {args.mode} {args.model} on {args.dataset}, {memory['note']}"
    print(log, file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="batchscope-maxbatch-") as scratch:
        workdir = Path(args.trials_dir) if args.trials_dir else Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        runner = TrialRunner(args, forwarded, memory["trial_budget_mb"], workdir)
        found = search.search(
            runner,
            start=args.start,
            cap=args.cap,
            capacity_mb=memory["capacity_mb"],
            margin=args.margin,
            tolerance=args.tolerance,
            max_trials=args.max_trials,
            on_trial=_print_trial,
        )
    summary = f"{found.summary} ({memory['note']})"
    trials = [{**t, **runner.extras.get(t["batch_size"], {})} for t in found.to_dict()["trials"]]
    first = runner.first_result or {}
    out = {
        "schema_version": results.SCHEMA_VERSION,
        "mode": args.mode,
        "model": args.model,
        "dataset": args.dataset,
        "device": first.get("device", memory["device"]),
        "device_name": first.get("device_name"),
        **found.to_dict(),
        "trials": trials,
        "summary": summary,
        "capacity_source": memory["source"],
        "cpu_memory_budget_mb": memory["cpu_budget_mb"],
        "trial_cpu_memory_budget_mb": memory["trial_budget_mb"],
        "trial_command": runner.command("{batch_size}", Path("{trial}")),
        "env_fingerprint": first.get("env_fingerprint"),
        "torch_version": first.get("torch_version"),
        "wall_s": time.perf_counter() - started,
    }
    results.write_json(args.output, out)
    print(f"batchscope maxbatch: {summary}; grid {list(found.grid)}", file=sys.stderr)
    return 0


def _print_trial(trial: search.Trial) -> None:
    peak = "?" if trial.peak_mem_mb is None else f"{trial.peak_mem_mb:.1f} MB"
    verdict = "fits" if trial.fits else "does not fit"
    print(
        f"batchscope maxbatch: batch {trial.batch_size} ({trial.phase}): {trial.status},"
        f" peak {peak}: {verdict}",
        file=sys.stderr,
    )


# --- where the limit comes from -----------------------------------------------------------


def _memory_limits(args: argparse.Namespace) -> dict:
    """Device, capacity for the search, and the budget each CPU trial runs under."""
    device = "cpu" if args.device == "cpu" else None
    total_mb = None
    if device is None and (args.device == "auto" or args.capacity_mb is None):
        device, total_mb = _query_device(args.device)
    elif device is None:
        device = args.device
    if device == "cpu":
        if args.cpu_memory_budget_mb is not None:
            budget, source = args.cpu_memory_budget_mb, "cpu_memory_budget_mb"
        else:
            import psutil

            budget, source = psutil.virtual_memory().available / _MB, "available RAM"
        trial_budget = (1.0 - args.margin) * budget
        return {
            "device": device,
            "capacity_mb": None,
            "cpu_budget_mb": budget,
            "trial_budget_mb": trial_budget,
            "source": source,
            "note": (
                f"cpu, trials under {trial_budget:.0f} MB ({budget:.0f} MB {source}"
                f" less a {args.margin:.0%} margin)"
            ),
        }
    capacity, source = args.capacity_mb, "capacity_mb"
    if capacity is None:
        capacity, source = total_mb, f"{device} total memory"
    if capacity is None:
        raise MaxBatchError(f"no memory size known for device {device!r}: pass --capacity-mb")
    return {
        "device": device,
        "capacity_mb": capacity,
        "cpu_budget_mb": None,
        "trial_budget_mb": None,
        "source": source,
        "note": f"{device}, peak at most {1 - args.margin:.0%} of {capacity:.0f} MB ({source})",
    }


def _query_device(requested: str) -> tuple[str, float | None]:
    """The device ``requested`` resolves to and its memory in MB, from a subprocess."""
    cmd = [sys.executable, "-c", _DEVICE_QUERY, requested]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise MaxBatchError(f"cannot query device {requested!r}: {tail}")
    info = json.loads(lines[-1])
    if "error" in info:
        raise MaxBatchError(info["error"])
    total = info["total_bytes"]
    return info["device"], None if total is None else total / _MB


# --- one trial ----------------------------------------------------------------------------


class TrialRunner:
    """``runner(batch_size) -> search.TrialResult``: one bench process per call."""

    def __init__(
        self,
        args: argparse.Namespace,
        forwarded: list[str],
        trial_budget_mb: float | None,
        workdir: Path,
    ) -> None:
        self.args = args
        self.forwarded = forwarded
        self.trial_budget_mb = trial_budget_mb
        self.workdir = workdir
        self.extras: dict[int, dict] = {}  # batch size -> bench's own fields worth keeping
        self.first_result: dict | None = None

    def command(self, batch_size: int | str, stem: Path) -> list[str]:
        a = self.args
        steps = a.trial_warmup_steps + a.trial_steps
        options = json.loads(a.dataset_options)
        synthetic = options.get("synthetic")
        if a.dataset == "synthetic" and isinstance(synthetic, dict) and isinstance(batch_size, int):
            # enough samples for every step; the pool of distinct images stays as it is
            needed = batch_size * steps
            options["synthetic"] = {
                **synthetic,
                "num_samples": max(synthetic.get("num_samples", 0), needed),
            }
        cmd = [sys.executable, "-m", "batchscope.bench", "--mode", a.mode, "--model", a.model]
        cmd += ["--dataset", a.dataset, "--dataset-options", json.dumps(options)]
        if a.data_root is not None:
            cmd += ["--data-root", a.data_root]
        cmd += ["--device", a.device, "--seed", str(a.seed), "--num-workers", str(a.num_workers)]
        if a.threads is not None:
            cmd += ["--threads", str(a.threads)]
        cmd += ["--batch-size", str(batch_size)]
        cmd += ["--warmup-steps", str(a.trial_warmup_steps), "--max-steps", str(steps)]
        cmd += ["--val-batch-size", str(a.val_batch_size or batch_size)]
        if self.trial_budget_mb is not None:
            cmd += ["--cpu-memory-budget-mb", f"{self.trial_budget_mb:.3f}"]
        cmd += ["--output", f"{stem}.json", "--steps", f"{stem}.steps.csv"]
        return cmd + self.forwarded

    def __call__(self, batch_size: int) -> search.TrialResult:
        stem = self.workdir / f"bs{batch_size}"
        cmd = self.command(batch_size, stem)
        env = {**os.environ, "PYTHONHASHSEED": str(self.args.seed)}
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=self.args.trial_timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise MaxBatchError(
                f"batch {batch_size}: trial ran past {self.args.trial_timeout:.0f} s"
            ) from exc
        process_s = time.perf_counter() - t0
        results.write_text(f"{stem}.log", shlex.join(cmd) + "\n" + done.stderr)
        extras = {"process_s": process_s, "returncode": done.returncode}
        self.extras[batch_size] = extras
        if done.returncode != 0:
            return self._crashed(batch_size, done, extras)
        result = results.read_json(f"{stem}.json")
        if self.first_result is None:
            self.first_result = result
        extras.update({key: result.get(key) for key in _TRIAL_KEYS})
        extras["bench_status"] = status = result["status"]
        peak = result.get("peak_mem_mb")
        if status == "oom":
            return search.TrialResult(False, peak, "oom")
        # "ok", or "diverged": the loss blew up but the memory held
        return search.TrialResult(True, peak, status)

    def _crashed(self, batch_size: int, done, extras: dict) -> search.TrialResult:
        lines = done.stderr.strip().splitlines()
        if any(line.startswith(_NO_STEPS) for line in lines):
            extras["error"] = next(line for line in lines if line.startswith(_NO_STEPS))
            return search.TrialResult(False, None, "too_large_for_data")
        if done.returncode == -signal.SIGKILL:  # the kernel's OOM killer, most likely
            extras["error"] = "killed (SIGKILL)"
            return search.TrialResult(False, None, "killed")
        tail = lines[-1] if lines else "no output"
        raise MaxBatchError(f"batch {batch_size}: bench exited {done.returncode}: {tail}")


if __name__ == "__main__":
    sys.exit(main())
