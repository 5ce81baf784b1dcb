"""Part 4 of the overhead benchmark, ``batch_sizes: auto``: the largest-batch search against fake
devices of known limit, and (``--real-maxbatch``) one real search on the CPU."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from sweeps import subprocess_env

from overhead import SEARCH_EXTRA_TRIALS, SEARCH_TOLERANCE
from overhead.abloop import synthetic_options
from overhead.fixedcost import timed


class AffineDevice:
    """A fake device with a known limit: peak memory = ``base + per_sample * batch``.

    CPU-like (``capacity`` False): the allocator refuses past ``limit`` and the failing trial
    reports the memory it held then, between the limit's peak and the wall. GPU-like: the
    capacity is such that ``limit`` is the largest batch whose peak is within ``1 - margin`` of
    it; trials above the capacity fail without a reading, those between run and report.
    """

    def __init__(self, limit: int, base: float, per_sample: float, *, gpu: bool, margin=0.1):
        self.limit, self.base, self.per_sample, self.gpu = limit, base, per_sample, gpu
        self.capacity_mb = self.peak(limit + 0.4) / (1 - margin) if gpu else None
        self.wall_mb = self.peak(limit + 0.6)

    def peak(self, batch: float) -> float:
        return self.base + self.per_sample * batch

    def __call__(self, batch: int):
        from batchscope.core.search import TrialResult

        if self.gpu:
            fits = self.peak(batch) <= self.capacity_mb
            return TrialResult(fits, self.peak(batch) if fits else None, "ok" if fits else "oom")
        if batch <= self.limit:
            return TrialResult(True, self.peak(batch), "ok")
        return TrialResult(False, self.peak(self.limit + 0.3), "oom")


def trial_bound(limit: int) -> int:
    return math.ceil(math.log2(limit)) + SEARCH_EXTRA_TRIALS


def auto_search(args: argparse.Namespace) -> dict:
    from batchscope.core import search

    limits = sorted(
        set(range(1, args.search_max + 1)) | {4095, 4097, 10_000, 50_000, 65_535, 100_000}
    )
    memories = ((600.0, 2.5), (40.0, 0.07), (8000.0, 30.0))  # MB, MB per sample
    worst_over, worst_error, failures, searches = -math.inf, 0.0, [], 0
    worst_case = None
    for gpu in (False, True):
        for base, per_sample in memories:
            for limit in limits:
                fake = AffineDevice(limit, base, per_sample, gpu=gpu)
                found = search.search(
                    fake, cap=1 << 20, capacity_mb=fake.capacity_mb, tolerance=SEARCH_TOLERANCE
                )
                searches += 1
                trials = len(found.trials)
                over = trials - trial_bound(limit)
                error = 1.0 if found.limit is None else (limit - found.limit) / limit
                if over > worst_over:
                    worst_over, worst_case = over, (limit, trials, gpu)
                worst_error = max(worst_error, error)
                if over > 0 or not 0 <= error <= SEARCH_TOLERANCE + 1e-12:
                    failures.append((limit, found.limit, trials, "gpu" if gpu else "cpu"))
    kinds = "CPU-like (failures report memory) and GPU-like (capacity, 10% margin)"
    print(
        f"{searches} searches: limits 1..{args.search_max} and 4095..100000, {kinds},"
        f" {len(memories)} memory lines each"
    )
    limit, trials, gpu = worst_case
    print(
        f"closest to the bound: limit {limit} took {trials} trials, bound ceil(log2 {limit}) +"
        f" {SEARCH_EXTRA_TRIALS} = {trials - worst_over} ({'GPU' if gpu else 'CPU'}-like); no"
        f" search used more than bound {worst_over:+d}"
    )
    print(f"largest shortfall below the true limit: {100 * worst_error:.2f}% (allowed 5%)")
    if failures:
        print(
            f"{len(failures)} searches out of bounds, e.g. (limit, found, trials): {failures[:5]}"
        )
    return {"worst_over": worst_over, "worst_error": worst_error, "ok": not failures}


def search_spec(args: argparse.Namespace):
    """The search of a real CPU run: training the script's model on 1 x 32 x 32 synthetic
    images under a 150 MB budget, the schema's other defaults (10% margin, from batch 1)."""
    from dataclasses import replace

    from batchscope.core import config, spec

    sweep = {
        "dataset": {"name": "synthetic", **synthetic_options(64, 1), "image_size": 32},
        "models": [args.model],
        "modes": ["train"],
        "batch_sizes": "auto",
        "num_workers": [0],
        "seeds": [args.seed],
        "device": "cpu",
        "cpu_memory_budget_mb": 150,
        "maxbatch": {"tolerance": SEARCH_TOLERANCE},
    }
    cfg = config.completed(sweep)
    found = spec.build_search(cfg, mode="train", model=args.model)
    # the trials grow their synthetic data to cover their steps: no cap from its 64 samples
    return replace(found, cap=cfg["maxbatch"]["cap"])


def real_maxbatch(args: argparse.Namespace) -> dict:
    env = subprocess_env()
    with tempfile.TemporaryDirectory(prefix="batchscope-maxbatch-") as tmp:
        spec_path, out = Path(tmp) / "search.spec.json", Path(tmp) / "search.json"
        spec_path.write_text(search_spec(args).to_json())
        cmd = [sys.executable, "-m", "batchscope.bench.maxbatch", str(spec_path)]
        cmd += ["--threads", "1", "--output", str(out)]
        print("real CPU search, 150 MB budget, 10% margin, each trial a bench process ...")
        elapsed, _ = timed(cmd, env)
        result = json.loads(out.read_text())
    limit, trials = result["limit"], result["trial_count"]
    steps = [
        f"{t['batch_size']} {t['phase']} {t['status']}"
        + (f" {t['peak_mem_mb']:.0f} MB" if t["peak_mem_mb"] is not None else "")
        for t in result["trials"]
    ]
    print("trials (batch, why tried, outcome, peak): " + "; ".join(steps))
    bound = trial_bound(limit) if limit else None
    print(
        f"{result['summary']}; {elapsed:.0f} s; bound ceil(log2 {limit}) + 4 = {bound};"
        f" converged: {result['converged']} (within 5% of the boundary these trials observed;"
        " the true limit of a real allocator is not known)"
    )
    ok = limit is not None and result["converged"] and trials <= bound
    return {"limit": limit, "trials": trials, "bound": bound, "ok": ok}
