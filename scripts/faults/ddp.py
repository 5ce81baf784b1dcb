"""Faults in one rank of a run on two devices (two gloo processes on the CPU started by
torchrun), on a copy of the two-device base with that point's result removed: a rank killed,
and a rank out of memory under the CPU memory budget."""

from __future__ import annotations

import os

from sweeps import REPO

from batchscope.bench.job import FAULT_RANK_ENV
from faults.harness import READS_ANSWER, Row, Run, Suite, observe

#: Names the rank whose CPU memory budget ``SITECUSTOMIZE`` shrinks to nothing.
OOM_RANK_ENV = "BATCHSCOPE_FAULT_SUITE_OOM_RANK"

#: Put first on the jobs' PYTHONPATH: in the rank ``OOM_RANK_ENV`` names, batchscope's own
#: CPU memory budget (``measure.limit_cpu_memory``: RLIMIT_DATA, set just before the loop)
#: allows nothing beyond what the rank holds then, so its loop's first allocation fails in the
#: allocator, as an over-large batch's would. Every other process is left as it is.
SITECUSTOMIZE = f'''"""The fault suite's hook (scripts/faults/ddp.py)."""
import os

if os.environ.get("RANK") is not None and os.environ.get("RANK") == os.environ.get(
    "{OOM_RANK_ENV}"
):
    from batchscope.bench import measure

    limit = measure.limit_cpu_memory
    measure.limit_cpu_memory = lambda budget_mb: limit(0)
'''


def rank_killed(suite: Suite) -> Row:
    folder = suite.copy("ddp", "rank-killed")
    point = folder.drop("train", 8, devices=2)
    # the test hook tests/workflow/test_devices.py uses: the rank dies by SIGKILL once the
    # process group is up
    env = {FAULT_RANK_ENV: "1"}
    return observe(
        "a DDP rank killed (kill -9 of rank 1 of 2)", folder,
        lambda: folder.run("--cores", "2", env=env), points=[point],
    )  # fmt: skip


def rank_oom(suite: Suite) -> Row:
    folder = suite.copy("ddp", "rank-oom")
    point = folder.drop("train", 8, devices=2)
    hook = folder.path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # the hook first on the path, this checkout after it
    env = {OOM_RANK_ENV: "1", "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)])}

    def fault() -> Run:
        return folder.run("--cores", "2", env=env)

    # the job succeeds: its oom is a result, which the answer reports
    return observe(
        "OOM (CPU memory budget) in rank 1 of 2", folder, fault, points=[point],
        sees=lambda run: folder.answer_line(r"Out of memory"),
        how="rank 1's budget set to 0 MB beyond what it holds (a sitecustomize on PYTHONPATH);"
        f" {READS_ANSWER}",
    )  # fmt: skip


#: The cases of this family, by the name ``--cases`` takes.
CASES = {"rank-killed": rank_killed, "rank-oom": rank_oom}
