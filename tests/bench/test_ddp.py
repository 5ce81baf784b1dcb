"""Runs on several devices, the parts that need no second process: what rank 0 makes of every
rank's measurement, and the line that names the rank that failed a job."""

import contextlib

import pytest
import torch

from batchscope.bench import ddp
from batchscope.bench.loop import NO_PHASES
from batchscope.bench.steps import train_step
from batchscope.bench.torchrun_failure import failure_line
from tests.factories import make_spec

# torchrun's report when rank 1 was killed and rank 0 then failed on the broken connection
ROOT_CAUSE = """\
batchscope bench: rank 0 of 2: error: RuntimeError: Connection reset by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
batchscope.bench FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_06:56:41
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12
=======================================================
"""


def test_a_killed_rank_is_named_not_the_rank_that_lost_it():
    assert failure_line(ROOT_CAUSE, 2) == (
        "batchscope bench: rank 1 of 2 died: exit code -9 (SIGKILL)"
    )


def test_a_rank_that_raised_is_named_with_its_own_error():
    own = "batchscope bench: rank 1 of 2: error: ValueError: bad batch\n"
    log = own + ROOT_CAUSE.replace("exitcode  : -9 (pid: 12)  (SIGKILL)", "exitcode  : 1")
    assert failure_line(log, 2) == own.strip()


def test_a_log_without_a_report_still_gives_one_line():
    assert failure_line("", 4) == "batchscope bench: the 4-device run failed"


def _rank(rate, wait, peak):
    return {"samples_per_s": rate, "data_wait_frac": wait, "peak_mem_mb": peak}


def test_rank_zero_reports_the_sum_the_slowest_wait_and_the_largest_memory():
    group = ddp.Group(rank=0, world_size=2, local_rank=0, local_world_size=2)
    outcome = {"samples_per_s_windows": [90.0, 110.0], "samples_per_s_iqr": 10.0}
    ranks = [_rank(100.0, 0.1, 500.0), _rank(300.0, 0.3, 400.0)]
    combined = ddp.combine(outcome, ranks, group)
    assert combined["samples_per_s"] == pytest.approx(400.0)
    assert combined["samples_per_s_per_rank"] == [100.0, 300.0]
    assert (combined["data_wait_frac"], combined["peak_mem_mb"]) == (0.3, 500.0)
    assert combined["world_size"] == 2
    # rank 0's windows, scaled to the whole run (x4 here)
    assert combined["samples_per_s_windows"] == pytest.approx([360.0, 440.0])
    assert combined["samples_per_s_iqr"] == pytest.approx(40.0)


class _Synced(torch.nn.Module):
    """Stands in for DDP: counts the backward passes run inside and outside ``no_sync``."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        self.quiet = False
        self.passes = {"no_sync": 0, "synced": 0}

    @contextlib.contextmanager
    def no_sync(self):
        self.quiet = True
        try:
            yield
        finally:
            self.quiet = False

    def forward(self, x):
        out = self.inner(x)
        kind = "no_sync" if self.quiet else "synced"
        out.register_hook(lambda grad: self.passes.__setitem__(kind, self.passes[kind] + 1))
        return out


def test_accumulation_all_reduces_only_on_the_last_micro_batch():
    spec = make_spec("train", batch_size=2, accumulation_steps=3)
    model = _Synced()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = train_step(model, optimizer, spec, torch.device("cpu"))
    step(torch.randn(6, 1, 2, 2), torch.randint(0, 3, (6,)), NO_PHASES)
    assert model.passes == {"no_sync": 2, "synced": 1}


def test_a_two_device_spec_run_as_one_process_is_one_line(tmp_path, monkeypatch, capsys):
    from batchscope.bench import job

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    spec = tmp_path / "spec.json"
    spec.write_text(make_spec("train", devices=2).to_json())
    out = [str(spec), "--output", str(tmp_path / "r.json"), "--steps", str(tmp_path / "s.csv")]
    assert job.main(out) == 1
    assert capsys.readouterr().err == (
        "batchscope bench: error: the spec is for 2 device(s) but 1 process(es) run it: start it"
        " with python -m torch.distributed.run --nproc-per-node 2\n"
    )
    assert not (tmp_path / "r.json").exists()


def test_a_rank_out_of_memory_keeps_the_points_oom_result(tmp_path, capsys):
    from batchscope.bench import torchrun_failure
    from batchscope.core import results
    from tests.factories import fake_result

    log, result = tmp_path / "job.log", tmp_path / "r.json"
    log.write_text(ROOT_CAUSE)
    error = "rank 1 of 2, step 3: CUDA out of memory"
    results.write_json(result, fake_result(status="oom", error=error, oom_rank=1, oom_step=3))
    argv = [str(log), "--devices", "2", "--result", str(result)]
    assert torchrun_failure.main(argv) == 0  # the job succeeds: the point has its answer
    line = f"batchscope bench: out of memory, the point's result is oom: {error}"
    assert log.read_text().splitlines()[-1] == line
    assert capsys.readouterr().err == line + "\n"


def test_a_failed_run_without_an_oom_result_fails_its_job_with_the_ranks_line(tmp_path):
    from batchscope.bench import torchrun_failure
    from batchscope.core import results
    from tests.factories import fake_result

    log, result = tmp_path / "job.log", tmp_path / "r.json"
    log.write_text(ROOT_CAUSE)
    argv = [str(log), "--devices", "2", "--result", str(result)]
    assert torchrun_failure.main(argv) == 1  # no result at all
    results.write_json(result, fake_result(status="ok"))
    assert torchrun_failure.main(argv) == 1  # rank 0's result, then a failure: not kept
    died = "batchscope bench: rank 1 of 2 died: exit code -9 (SIGKILL)"
    assert log.read_text().splitlines()[-2:] == [died, died]


def test_the_injected_oom_hits_only_its_rank_at_its_step(monkeypatch):
    monkeypatch.setenv(ddp.OOM_AT_ENV, "1:2")
    calls = []

    def step(x, y, clock):
        calls.append(x)

    assert ddp.injected_oom(step, rank=0) is step
    oom = ddp.injected_oom(step, rank=1)
    oom(1, None, None)
    with pytest.raises(torch.OutOfMemoryError):
        oom(2, None, None)
    assert calls == [1]  # the step that ran out did no work
