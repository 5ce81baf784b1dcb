"""Entry point: the largest batch size that fits one mode × model (``batch_sizes: auto``).

    python -m batchscope.bench.maxbatch specs/maxbatch/train/small_cnn.json --threads 2 \\
        --output results/maxbatch/train/small_cnn.json

The search spec (``batchscope.core.spec.SearchSpec``) holds the trial's workload (the sweep's
own run spec) and the search's settings. Every trial is a fresh ``python -m batchscope.bench``
process on that spec with the trial's batch size (an allocator failure, a CUDA
context in a bad state or a fragmented heap cannot carry over to the next trial) running one
warm-up step and ``--trial-steps`` measured steps; its result JSON says ``ok`` or ``oom`` and
its peak memory. :func:`batchscope.core.search.search` picks the sizes: doubling, then the memory
model's prediction, then bisection. The output JSON holds the limit, the grid to sweep (powers
of two up to the limit, plus the limit), the memory-vs-batch curve and every trial.

Where the memory comes from:

- **CPU**: the limit is a memory budget (config ``cpu_memory_budget_mb``; without one, the
  memory the machine has available when the search starts). Each trial runs under the budget
  *less the margin* (the trial spec's ``cpu_memory_budget_mb``, enforced with ``RLIMIT_DATA``),
  so a batch that does not fit fails in the real allocator and the margin is enforced by it.
  The budget counts private memory mapped after the trial's set-up while ``peak_mem_mb`` is
  the resident set, so the two are not comparable; the search takes the wall from the failures'
  own readings.
- **CUDA**: the capacity is ``maxbatch.capacity_mb``, or the device's total memory, read by a
  short ``python`` subprocess before the first trial (torch never initialises CUDA in this
  process: a context held here would take memory from the trials). A trial fits only if all the
  device memory it needed, ``cuda_peak_device_mb`` (the caching allocator's peak reservation,
  validation included, plus the CUDA context, libraries and anything else on the device), is at
  most ``(1 - margin) × capacity``. Peak *allocated* memory leaves out the allocator's slack and
  the context, hundreds of MB on a real GPU. **MPS**: as CUDA, on the trial's ``peak_mem_mb``.

A trial is the sweep's own workload (``SearchSpec.run``: its largest worker count and
accumulation, pinned buffers as configured, the validation pass after training) and measures
the gradient noise scale on every step when the sweep measures it at all, so that every buffer
a sweep's run holds is held in the trial. Synthetic data gets ``num_samples`` raised per trial
to cover the trial's steps. A size larger than a real dataset's split allows is the trial's own
result (``too_large_for_data``) and counts as a failure. A size the model cannot run for a
reason other than memory (``cannot_run``: BatchNorm refuses batch 1 on 1×1 feature maps) is a
result too: below every size that fitted the search goes on above it and the grid starts above
it (``batchscope.core.search``). Exits 0 with the result written, also when no size fits
(``limit``: null); a trial that crashes otherwise (bad input: the data or the device) stops the
search with one line and exit 1.
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
from dataclasses import replace
from pathlib import Path

from batchscope.core import results, search
from batchscope.core.spec import RunSpec, SearchSpec, SpecError

_MB = 1024 * 1024

#: The status bench gives a trial whose batch leaves no step to measure (bench.job).
TOO_LARGE_FOR_DATA = results.TOO_LARGE_FOR_DATA
#: The status bench gives a trial whose batch the model cannot run (bench.job).
CANNOT_RUN = results.CANNOT_RUN

#: How each trial runs: warm-up steps, then measured steps (memory peaks in the first step;
#: the second shows it holds), and the search's own bounds.
TRIAL_WARMUP_STEPS = 1
TRIAL_STEPS = 2
MAX_TRIALS = 40
TRIAL_TIMEOUT_S = 1800.0

#: Result keys of a trial worth keeping beside the search's own record.
_TRIAL_KEYS = (
    "error",
    "peak_rss_mb",
    "cuda_max_allocated_mb",
    "cuda_max_reserved_mb",
    "cuda_peak_device_mb",
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench.maxbatch", description=__doc__.split("\n")[0]
    )
    p.add_argument("spec", help="the search spec (JSON, batchscope.core.spec.SearchSpec)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per trial")
    p.add_argument("--trials-dir", default=None, help="keep each trial's files here")
    p.add_argument("--output", required=True, help="the search's result JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _maxbatch(SearchSpec.read(args.spec), args)
    except (MaxBatchError, search.SearchError, SpecError) as exc:
        print(f"batchscope maxbatch: error: {exc}", file=sys.stderr)
        return 1


def _maxbatch(spec: SearchSpec, args: argparse.Namespace) -> int:
    started = time.perf_counter()
    run = spec.run
    memory = _memory_limits(spec)
    log = f"batchscope maxbatch: {run.mode} {run.model} on {run.dataset.name}, {memory['note']}"
    print(log, file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="batchscope-maxbatch-") as scratch:
        workdir = Path(args.trials_dir) if args.trials_dir else Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        runner = TrialRunner(run, args.threads, memory["trial_budget_mb"], workdir)
        found = search.search(
            runner,
            start=spec.start,
            cap=spec.cap,
            capacity_mb=memory["capacity_mb"],
            margin=spec.margin,
            tolerance=spec.tolerance,
            max_trials=MAX_TRIALS,
            on_trial=_print_trial,
        )
    summary = f"{found.summary} ({memory['note']})"
    trials = [{**t, **runner.extras.get(t["batch_size"], {})} for t in found.to_dict()["trials"]]
    first = runner.first_result or {}
    out = {
        "schema_version": results.SCHEMA_VERSION,
        "mode": run.mode,
        "model": run.model,
        "dataset": run.dataset.name,
        "device": first.get("device", memory["device"]),
        "device_name": first.get("device_name"),
        **found.to_dict(),
        "trials": trials,
        "summary": summary,
        "capacity_source": memory["source"],
        "cpu_memory_budget_mb": memory["cpu_budget_mb"],
        "trial_cpu_memory_budget_mb": memory["trial_budget_mb"],
        "trial_command": runner.command("{trial}.spec.json", Path("{trial}")),
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
    if trial.reason is not None:
        verdict += f": {trial.reason}"
    print(
        f"batchscope maxbatch: batch {trial.batch_size} ({trial.phase}): {trial.status},"
        f" peak {peak}: {verdict}",
        file=sys.stderr,
    )


# --- where the limit comes from -----------------------------------------------------------


def _memory_limits(spec: SearchSpec) -> dict:
    """Device, capacity for the search, and the budget each CPU trial runs under."""
    requested = spec.run.device
    device = "cpu" if requested == "cpu" else None
    total_mb = None
    if device is None and (requested == "auto" or spec.capacity_mb is None):
        device, total_mb = _query_device(requested)
    elif device is None:
        device = requested
    if device == "cpu":
        if spec.run.cpu_memory_budget_mb is not None:
            budget, source = spec.run.cpu_memory_budget_mb, "cpu_memory_budget_mb"
        else:
            import psutil

            budget, source = psutil.virtual_memory().available / _MB, "available RAM"
        trial_budget = (1.0 - spec.margin) * budget
        return {
            "device": device,
            "capacity_mb": None,
            "cpu_budget_mb": budget,
            "trial_budget_mb": trial_budget,
            "source": source,
            "note": (
                f"cpu, trials under {trial_budget:.0f} MB ({budget:.0f} MB {source}"
                f" less a {spec.margin:.0%} margin)"
            ),
        }
    capacity, source = spec.capacity_mb, "capacity_mb"
    if capacity is None:
        capacity, source = total_mb, f"{device} total memory"
    if capacity is None:
        raise MaxBatchError(f"no memory size known for device {device!r}: set maxbatch.capacity_mb")
    return {
        "device": device,
        "capacity_mb": capacity,
        "cpu_budget_mb": None,
        "trial_budget_mb": None,
        "source": source,
        "note": (
            f"{device}, peak {'device memory' if device.startswith('cuda') else 'allocated'}"
            f" at most {1 - spec.margin:.0%} of {capacity:.0f} MB ({source})"
        ),
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


def trial_peak_mb(result: dict) -> float | None:
    """The memory a trial is judged on: on CUDA all the device memory it needed
    (``cuda_peak_device_mb``), elsewhere its ``peak_mem_mb``."""
    device_mb = result.get("cuda_peak_device_mb")
    return result.get("peak_mem_mb") if device_mb is None else device_mb


class TrialRunner:
    """``runner(batch_size) -> search.TrialResult``: one bench process per call, on the sweep's
    run spec with the trial's batch size and length."""

    def __init__(
        self, run: RunSpec, threads: int | None, trial_budget_mb: float | None, workdir: Path
    ) -> None:
        self.run = run
        self.threads = threads
        self.trial_budget_mb = trial_budget_mb
        self.workdir = workdir
        self.extras: dict[int, dict] = {}  # batch size -> bench's own fields worth keeping
        self.first_result: dict | None = None

    def trial_spec(self, batch_size: int) -> RunSpec:
        """The sweep's spec at ``batch_size``, one warm-up and two measured steps, under the
        trial's memory budget (synthetic data grown to cover every step), measuring the noise
        scale on every step when the sweep measures it."""
        steps = TRIAL_WARMUP_STEPS + TRIAL_STEPS
        dataset = self.run.dataset
        if dataset.synthetic is not None:
            needed = batch_size * self.run.accumulation_steps * steps
            grown = max(dataset.synthetic.num_samples, needed)
            dataset = replace(dataset, synthetic=replace(dataset.synthetic, num_samples=grown))
        measure = replace(
            self.run.measure, warmup_steps=TRIAL_WARMUP_STEPS, min_steps=0, min_seconds=0.0
        )
        train = self.run.train
        if train is not None and train.noise_scale_every_steps:
            train = replace(train, noise_scale_every_steps=1)  # its buffers, within the trial
        budget = self.trial_budget_mb
        return replace(
            self.run,
            batch_size=batch_size,
            max_steps=steps,
            measure=measure,
            dataset=dataset,
            train=train,
            cpu_memory_budget_mb=None if budget is None else round(budget, 3),
        )

    def command(self, spec_path: str | Path, stem: Path) -> list[str]:
        cmd = [sys.executable, "-m", "batchscope.bench", str(spec_path)]
        if self.threads is not None:
            cmd += ["--threads", str(self.threads)]
        return cmd + ["--output", f"{stem}.json", "--steps", f"{stem}.steps.csv"]

    def __call__(self, batch_size: int) -> search.TrialResult:
        stem = self.workdir / f"bs{batch_size}"
        spec_path = Path(f"{stem}.spec.json")
        results.write_text(spec_path, self.trial_spec(batch_size).to_json())
        cmd = self.command(spec_path, stem)
        env = {**os.environ, "PYTHONHASHSEED": str(self.run.seed)}
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=TRIAL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as exc:
            raise MaxBatchError(
                f"batch {batch_size}: trial ran past {TRIAL_TIMEOUT_S:.0f} s"
            ) from exc
        process_s = time.perf_counter() - t0
        results.write_text(f"{stem}.log", shlex.join(cmd) + "\n" + done.stderr)
        extras = {"process_s": process_s, "returncode": done.returncode}
        self.extras[batch_size] = extras
        if done.returncode != 0:
            return self._crashed(batch_size, done, extras)
        result = results.read_json(f"{stem}.json")
        extras["bench_status"] = status = result["status"]
        if status == TOO_LARGE_FOR_DATA:
            extras["error"] = result["error"]
            return search.TrialResult(False, None, TOO_LARGE_FOR_DATA)
        if status == CANNOT_RUN:
            reason = result["error"]
            return search.TrialResult(False, None, CANNOT_RUN, cannot_run=True, reason=reason)
        if self.first_result is None:
            self.first_result = result
        extras.update({key: result.get(key) for key in _TRIAL_KEYS})
        peak = trial_peak_mb(result)
        if status == "oom":
            return search.TrialResult(False, peak, "oom")
        # "ok", or "diverged": the loss blew up but the memory held
        return search.TrialResult(True, peak, status)

    def _crashed(self, batch_size: int, done, extras: dict) -> search.TrialResult:
        if done.returncode == -signal.SIGKILL:  # the kernel's OOM killer, most likely
            extras["error"] = "killed (SIGKILL)"
            return search.TrialResult(False, None, "killed")
        lines = done.stderr.strip().splitlines()
        tail = lines[-1] if lines else "no output"
        raise MaxBatchError(f"batch {batch_size}: bench exited {done.returncode}: {tail}")


if __name__ == "__main__":
    sys.exit(main())
