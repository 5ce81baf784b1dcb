"""Part 2 of the overhead benchmark: the fixed cost of a bench job, tiny jobs in fresh processes
timed from outside beside PyTorch's floor (a process that imports torch), and the modules a
whole bench run loads."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweeps import median, subprocess_env

from overhead import FIXED_COST_GOAL, PLOTTING
from overhead.abloop import synthetic_options

_TIME_IMPORT = (
    "import sys, time\n"
    "t = time.perf_counter()\n"
    "for name in sys.argv[1:]:\n"
    "    __import__(name)\n"
    "print(time.perf_counter() - t)\n"
)

#: A whole bench run in this process, then every module it has loaded.
_BENCH_THEN_MODULES = (
    "import json, sys\n"
    "from batchscope.bench import job as bench\n"
    "rc = bench.main(sys.argv[1:])\n"
    "print(json.dumps({'rc': rc, 'modules': sorted(sys.modules)}))\n"
)

#: The goal's yardstick, PyTorch's floor: a fresh process that imports torch and exits.
_IMPORT_TORCH = "import torch\n"

#: A training process's floor: torch and an optimizer, whose first parameter group imports
#: torch._dynamo (torch.optim's own: any training script pays it).
_TRAIN_FLOOR = "import torch\ntorch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)\n"

#: What bench imports before its own clock (``wall_s``) starts, for the small CNN's inference
#: on synthetic data (``batchscope.bench.job.import_what_the_run_needs`` and ``main``).
_BENCH_PRE_CLOCK = (
    "torch",
    "batchscope.bench.job",
    "batchscope.bench.data",
    "batchscope.bench.loop",
    "batchscope.bench.measure",
)

#: What a bench process should load only where its run needs it.
_HEAVY = ("torchvision", "PIL", "torch._dynamo", "torch._inductor", "sympy", *PLOTTING)

#: The tiny jobs: 1 warm-up + 2 measured steps of this batch.
_TINY_BATCH = 32


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"{' '.join(cmd[:4])} ... exited {done.returncode}:\n{tail}")
    return elapsed, done


def tiny_spec(args: argparse.Namespace, mode: str):
    """The run spec of a tiny job: the schema's defaults, this script's model, data and device,
    1 warm-up + 2 measured steps; training without its validation pass over the test split
    (work that grows with the split, not a fixed cost)."""
    from dataclasses import replace

    from batchscope.core import config, spec

    dataset = {"name": args.dataset}
    if args.dataset == "synthetic":
        dataset.update(synthetic_options(_TINY_BATCH, 4))
    sweep = {
        "dataset": dataset,
        "models": [args.model],
        "modes": [mode],
        "batch_sizes": [_TINY_BATCH],
        "num_workers": [args.num_workers],
        "seeds": [args.seed],
        "device": args.device,
        "deterministic": args.deterministic,
        "measure": {"warmup_steps": 1, "repeats": 1},
        mode: {"max_steps": 3},
    }
    cfg = config.completed(sweep)
    run = spec.build(
        cfg, mode=mode, model=args.model, batch_size=_TINY_BATCH,
        num_workers=args.num_workers, seed=args.seed,
    )  # fmt: skip
    if args.data_root:
        run = replace(run, dataset=replace(run.dataset, root=str(Path(args.data_root).resolve())))
    if run.train is not None:
        run = replace(run, train=replace(run.train, validate=False))
    return run


def bench_command(args: argparse.Namespace, folder: Path, name: str, mode: str) -> list[str]:
    """``python -m batchscope.bench`` on :func:`tiny_spec`, its spec and results in ``folder``."""
    spec_path = folder / f"{name}.spec.json"
    spec_path.write_text(tiny_spec(args, mode).to_json())
    cmd = [sys.executable, "-m", "batchscope.bench", str(spec_path)]
    cmd += ["--threads", str(args.threads or os.cpu_count() or 1)]
    return cmd + ["--output", str(folder / f"{name}.json"), "--steps", str(folder / f"{name}.csv")]


def bench_modules(args: argparse.Namespace, folder: Path, env: dict[str, str], mode: str) -> dict:
    """A whole tiny bench run of ``mode`` in one process: its modules, and the heavy ones."""
    cmd = bench_command(args, folder, f"modules-{mode}", mode)
    _, done = timed([sys.executable, "-c", _BENCH_THEN_MODULES, *cmd[3:]], env)
    modules = json.loads(done.stdout.strip().splitlines()[-1])["modules"]
    heavy = [h for h in _HEAVY if any(m == h or m.startswith(h + ".") for m in modules)]
    return {"count": len(modules), "heavy": heavy}


def fixed_cost(args: argparse.Namespace) -> dict:
    env = subprocess_env()
    env["PYTHONHASHSEED"] = str(args.seed)
    py, n = sys.executable, args.fixed_runs
    interpreter = median(timed([py, "-c", "pass"], env)[0] for _ in range(n))
    torch_import = median(
        float(timed([py, "-c", _TIME_IMPORT, "torch"], env)[1].stdout) for _ in range(n)
    )
    pre_clock = median(
        float(timed([py, "-c", _TIME_IMPORT, *_BENCH_PRE_CLOCK], env)[1].stdout) for _ in range(n)
    )
    print(f"interpreter start and exit (python -c pass): {interpreter:.2f} s")
    print(f"import torch alone (in-process clock): {torch_import:.2f} s")
    print(
        f"bench's imports before its clock ({', '.join(_BENCH_PRE_CLOCK)}; a run that needs"
        f" torchvision or torch._dynamo imports them there too): {pre_clock:.2f} s"
    )
    with tempfile.TemporaryDirectory(prefix="batchscope-overhead-") as tmp:
        folder = Path(tmp)
        loaded = {mode: bench_modules(args, folder, env, mode) for mode in ("infer", "train")}
        for mode, found in loaded.items():
            print(
                f"a whole {mode} bench run ({args.model} on {args.dataset}) loads"
                f" {found['count']} modules; of {', '.join(_HEAVY)}: {found['heavy'] or 'none'}"
            )
        runs = time_tiny_jobs(args, folder, env)
    infer, train = runs["infer"], runs["train"]
    ratio = infer["fixed"] / infer["floor"]
    print(
        f"per-job fixed cost, inference (outside - measured_s), median of {n}:"
        f" {infer['fixed']:.2f} s = ~{infer['outside_clock']:.2f} s outside the job's clock"
        " (interpreter, imports before the clock, writing results, exit)"
        f" + ~{infer['inside']:.2f} s inside it but not measured (set-up, data, model, FLOP"
        " count, warm-up)"
    )
    print(f'PyTorch\'s floor, python -c "import torch" timed from outside, median of {n}'
          f" in this run: {infer['floor']:.2f} s")  # fmt: skip
    print(f"fixed cost / floor = {ratio:.2f}   (the goal: <= {FIXED_COST_GOAL})")
    print(
        f"training: fixed cost {train['fixed']:.2f} s = {train['fixed'] / infer['floor']:.2f} x"
        f" import torch; its own floor, import torch and an optimizer (torch.optim imports"
        f" torch._dynamo), {train['floor']:.2f} s: {train['fixed'] / train['floor']:.2f} x that"
    )
    return {
        "fixed_s": infer["fixed"],
        "floor_s": infer["floor"],
        "ratio": ratio,
        "train_fixed_s": train["fixed"],
        "train_floor_s": train["floor"],
        "infer_heavy": loaded["infer"]["heavy"],
        "plotting": [m for m in loaded["train"]["heavy"] if m in PLOTTING],
    }


def time_tiny_jobs(args: argparse.Namespace, folder: Path, env: dict[str, str]) -> dict:
    """Tiny inference and training jobs, each beside its floor, alternating, fresh processes;
    the medians of their fixed costs and floors."""
    py = sys.executable
    print(
        f"tiny bench jobs: {args.model} on {args.dataset}, batch {_TINY_BATCH}, 1 warm-up + 2"
        " measured steps (training without its validation pass), each after its floor"
    )
    print(f"{'run':>3}  {'mode':<5}  {'floor':>6}  {'outside':>8}  {'wall_s':>7}  "
          f"{'measured':>8}  {'fixed':>6}")  # fmt: skip
    floors = {"infer": _IMPORT_TORCH, "train": _TRAIN_FLOOR}
    rows: dict[str, list[tuple[float, float, float, float]]] = {mode: [] for mode in floors}
    for i in range(1, args.fixed_runs + 1):
        for mode, floor_code in floors.items():
            floor, _ = timed([py, "-c", floor_code], env)
            outside, _ = timed(bench_command(args, folder, f"{mode}{i}", mode), env)
            result = json.loads((folder / f"{mode}{i}.json").read_text())
            wall, measured = result["wall_s"], result["measured_s"]
            rows[mode].append((floor, outside, wall, measured))
            print(
                f"{i:>3}  {mode:<5}  {floor:>5.2f}s  {outside:>7.2f}s  {wall:>6.2f}s"
                f"  {measured:>7.3f}s  {outside - measured:>5.2f}s",
                flush=True,
            )
    return {
        mode: {
            "floor": median(f for f, _, _, _ in got),
            "fixed": median(o - m for _, o, _, m in got),
            "outside_clock": median(o - w for _, o, w, _ in got),
            "inside": median(w - m for _, _, w, m in got),
        }
        for mode, got in rows.items()
    }
