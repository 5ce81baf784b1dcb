"""Stability benchmark (issue "A reproducible answer"): is the workflow's answer the same answer
when it is asked again, what does the race save, and what does the harness cost?

Usage (from the repository root, with the project's venv):

    .venv/bin/python scripts/stability_benchmark.py --json stability.json     # everything
    .venv/bin/python scripts/stability_benchmark.py --reruns 1 --skip-race --skip-harness \\
        --config 'batch_sizes=[32, 64]' --config measure.rounds=2              # a quick trial
    .venv/bin/python scripts/stability_benchmark.py --skip-reruns --skip-race --pairs 2

Every sweep runs ``snakemake --cores N`` in a fresh folder under ``--workdir`` (a new temporary
folder by default, kept, its path printed), from a config file written there: the default sweep
(``config/config.yaml``) with the ``--config``/``--race-config`` overrides applied. An override
is ``KEY=VALUE``: KEY is dotted (``measure.rounds``), VALUE is YAML (``[32, 64]``, ``race``).
Each sweep prepares and verifies its own copy of the dataset (seconds), as a fresh ``make run``
does, so its wall time is a fresh run's. The parts, each skippable and sized by options:

**(a) Reruns** (``--reruns K``, default 3; ``--skip-reruns``). The default sweep, K times from
scratch. Printed:

- each rerun's wall time (the whole ``snakemake`` command, timed from outside), its bench jobs
  and their job-seconds (the sum of the ``s`` column of ``benchmarks/bench/**.tsv``), beside the
  reference: the old ``make run`` took about 3-5.5 minutes and the goal is at most twice that.
  Wall times are printed, not judged (``make run`` also builds the report: a few seconds more).
- per grid point (mode x model x accumulation x batch x workers): its run-to-run CV in each
  rerun, std(ddof=1)/mean of the ``samples_per_s`` of its ok runs in ``results/summary.csv``
  (its rounds: each a fresh process), next to ``samples_per_s_cv`` of
  ``results/summary_by_point.csv`` (the workflow's own figure; they should be equal); the CV
  of all its runs of all reruns pooled; the CV of the reruns' medians (how far apart the reruns
  put the point); and in how many reruns the race eliminated it.
- per answer (mode x model x accumulation, from ``results/recommendation.json``): each rerun's
  pick, verdict and tie set (leader first), then:

  * ``same pick``: every rerun picked the same batch size and workers;
  * ``agree``: every rerun's pick lies in every rerun's tie set (same pick implies it, since a
    pick is always in its own tie set): no rerun's statistics rule out another rerun's answer;
  * ``verdicts``: whether the verdict flipped between reruns (e.g. separated, then
    undetermined);
  * ``contradiction``: a rerun A *claims a separation* when its verdict is ``separated``: its
    pick X, the leader and only member of its tie set, is significantly faster than every other
    point. Another rerun B *contradicts* that claim, in decreasing strength, when

    1. ``separated-other``: B is separated too, on a point Y != X (both claim significance);
    2. ``excluded``: X is not in B's tie set (B finds X significantly slower than its leader);
    3. ``other-leader``: X is in B's tie set, but B's leader (highest median) is not X;
    4. ``other-pick``: B's leader is X but B picks another point of its tie (by memory, workers).

    A ``disturbed`` B (measured beside other work: no pick) claims nothing and contradicts
    nothing; kinds 1
    and 2 are the strong ones (two reruns each claiming significance, in opposite directions).
    Each contradiction is printed as ``A->B kind X``, reruns numbered from 1.

**(b) Full vs race** (``--skip-race``). The same grid swept twice from scratch, once with
``sweep.strategy: full`` (every point in every round) and once with ``race`` (points
significantly slower than their group's leader stop after a round): by default batch sizes 32,
64, 128, 256 x workers 0, 1, 2, training only, the default ``measure.rounds``, no ceiling runs
(``--race-*`` options, ``--race-config`` overrides). Printed: each sweep's wall time, bench jobs
and job-seconds, the ratio race / full of job-seconds (the goal: <= 0.40) and of jobs, the
floor the design sets on that ratio (a race eliminates nothing before every point has 2 rounds,
so its jobs are at least 2/R of full's with R rounds), what the race eliminated and after which
round, whether any point it eliminated is in full's tie set (the race "dropping the wrong
point"), and per answer whether race and full agree: the same pick, or race's pick in full's
tie set (and any contradiction, as in (a)).

**(c) Harness vs a bare loop** (``--pairs N``, default 5; ``--skip-harness``). A = one bench job
through the workflow: ``snakemake --force results/runs/<mode>/<model>/bs<B>_acc1_nw<W>_seed0_
round1.json`` in its own folder (a first, unmeasured call prepares the dataset and the spec under
``specs/``), its ``samples_per_s`` read from the result (the median of its windows) and, beside
it, its overall ``measured_samples / measured_s``. B = a bare PyTorch loop in a fresh process
(this file, ``bare-loop`` subcommand), which imports torch and torchvision but not batchscope
(checked): the same Fashion-MNIST files through ``torchvision.datasets.FashionMNIST`` with the
same ``ToTensor`` and ``Normalize(0.2860, 0.3530)``, a hand-written copy of the small CNN (two
conv-BN-ReLU blocks, max-pool, adaptive average pool to 4x4, 1024-128-10 head), the same seed
before the model is built, torch threads = ``--cores``, ``--harness-batch`` (64) and workers
(0), the spec's determinism setting, SGD lr 0.05 momentum 0.9 (training; shuffled, drop_last)
or eval + ``inference_mode`` over the test split (inference). B runs the spec's warm-up steps,
then exactly as many measured steps as the A just before it, timed with ``perf_counter`` from
the end of the warm-up to the end of the last step: samples / seconds. Pairs run A B A B per
mode, interleaved train, infer. Printed: each pair, then per mode the median of the per-pair
ratios A / B (the goal: >= 0.97) and their spread.

This is a measurement, not a test: nothing is asserted and it exits 0 once every part ran, even
if a sweep failed (the failure is printed). Timings on a shared 2-core machine move a lot; the
CVs printed in (a) say by how much. The parts are modules of ``scripts/stability/``; this file
only runs them.
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["bare-loop"]:  # side B of (c): nothing here may import batchscope
        from stability import bare

        sys.exit(bare.main(sys.argv[2:]))
    from stability import cli

    sys.exit(cli.main(sys.argv[1:], description=__doc__.split("\n")[0]))
