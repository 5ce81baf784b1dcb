"""Overhead benchmark (issue 3, "No overhead of our own"): what the workflow costs beyond the work.

Usage (from the repository root):

    .venv/bin/python scripts/overhead_benchmark.py                  # CPU: every cheap part
    .venv/bin/python scripts/overhead_benchmark.py --device cuda    # runner vs loop on a GPU
    .venv/bin/python scripts/overhead_benchmark.py --sweep .        # also a finished `make run`
    .venv/bin/python scripts/overhead_benchmark.py --run-sweep      # also run the default sweep
    .venv/bin/python scripts/overhead_benchmark.py --skip-fixed-cost --rounds 6 --steps 60
    .venv/bin/python scripts/overhead_benchmark.py --skip-ab --fixed-runs 7  # no A/B rounds

It measures four things and ends with a table (goal, measured, target, PASS/MISS):

1. **Runner vs a bare loop.** The same model, batch size, data, SGD optimizer and seed, trained
   (a) through ``batchscope.bench.runner.run`` and (b) through a minimal hand-written loop (a plain
   DataLoader, zero_grad / forward / backward / step, one device-synchronised clock around the
   measured steps), alternating A B A B in this one process. Both sides count the same thing:
   samples over seconds of the measured steps after the same warm-up, clock started at the end
   of the last warm-up step, so the wait for each batch is inside. For the runner that is its
   overall ``measured_samples / measured_s``, not the median of its windows, so both are the
   same kind of mean. Goal: runner / bare >= 0.97 (median of the per-round ratios).
2. **Fixed cost per job.** ``python -m batchscope.bench`` on a spec of tiny work (batch 32,
   1 warm-up + 2 measured steps), ``--fixed-runs`` times, in fresh processes: the process's wall
   time seen from outside (interpreter start, imports, dataset, model, result files, exit) minus
   the work it measured (``measured_s``). Each job follows, in the same run, a fresh
   ``python -c "import torch"`` timed from outside the same way: PyTorch's floor, which any
   process that uses torch pays. Goal: median fixed cost of the inference jobs <= 1.3 x the
   median floor. Training jobs (without their validation pass over the test split, which is
   work) are timed beside a floor that also makes an optimizer, which imports ``torch._dynamo``
   (torch.optim's own), and printed as information. Shown too: interpreter start, ``import
   torch`` alone, the imports bench does before its own clock starts, and the split of the
   fixed cost into "outside the job's clock" (outside - ``wall_s``) and "inside, not measured"
   (``wall_s`` - ``measured_s``: set-up, data, model, FLOP count, warm-up). A whole inference
   and a whole training run each run to the end in one process whose ``sys.modules`` is then
   inspected: neither may load matplotlib, seaborn or pandas, and the small CNN's inference on
   synthetic data (the defaults) none of torchvision, PIL, ``torch._dynamo``,
   ``torch._inductor`` or sympy.
3. **Sweep wall time vs its jobs' work** (``--sweep DIR`` or ``--run-sweep``). ``DIR`` is the
   working directory of a finished ``snakemake`` run (the repository after ``make run``). The
   newest Snakemake log with jobs in it gives the wall time (its ``Date:`` header to its last
   timestamp) and the jobs it ran; their result JSONs give each bench job's own work
   (``wall_s``) and their ``benchmarks/**.tsv`` Snakemake's view of each job (column ``s``, the
   whole job process). ``--run-sweep`` runs the default sweep in a new temporary folder
   (kept, its path printed) and also times the whole command from outside. The wall time
   includes every job, so the goal's ratio is the wall time over the jobs' own work: the
   measuring jobs' (bench, ceiling) ``wall_s`` plus the other jobs' TSVs (download, capture,
   aggregate, plots, recommend: their whole process is their work). The measuring jobs' fixed
   costs (TSV - ``wall_s``) are printed apart, and the ratio also against the bench jobs'
   ``wall_s`` alone and against all jobs' TSVs.
4. **``batch_sizes: auto``**: :func:`batchscope.core.search.search` against fake devices whose peak
   memory is affine in the batch size and whose limit is known, over a range of limits (a
   CPU-like one, where a failure reports the memory it held, and a GPU-like one with a known
   capacity and margin). Goal: within 5% of the true limit in at most ceil(log2 limit) + 4
   trials, worst case over all limits. ``--real-maxbatch`` also runs ``python -m
   batchscope.bench.maxbatch`` on the CPU under a memory budget, from batch 1 (each trial a process;
   a minute or two) and prints its trial count against the same bound.

This is a measurement, not a test: nothing is asserted, and the exit status is 0 whatever the
figures. On a shared machine timings move (up to 40% between runs here); alternating A and B
cancels slow drifts, and the per-round figures show how much the rest moved. When the per-round
ratios spread wider (IQR) than the 3% being judged, the verdict is marked ``*``: rerun with more
``--rounds`` on a quieter machine. The runner's own bookkeeping between steps, which it times
itself (``time_runner_ms``), is printed too as a share of its step time: a figure the machine's
noise barely moves. The parts are modules of ``scripts/overhead/``; this file only runs them.
"""

import sys

if __name__ == "__main__":
    from overhead import cli

    sys.exit(cli.main(sys.argv[1:], description=__doc__.split("\n")[0]))
