"""A fault in the middle of writing a result, spec, index or round decision leaves either the
whole old file or none: never half a file that a rerun would take for finished, and no temporary
file beside it. (That every such writer goes through these: tests/workflow/test_writers.py.)"""

import errno
import os

import pytest

from batchscope.core import results


class _DiskFull:
    """A file handle whose write puts half its text on disk, then fails as a full disk does."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, data):
        self._handle.write(data[: len(data) // 2])
        self._handle.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)


@pytest.fixture
def disk_fills(monkeypatch):
    real_fdopen = os.fdopen
    monkeypatch.setattr(results.os, "fdopen", lambda *a, **k: _DiskFull(real_fdopen(*a, **k)))


def _rows_then_fault():
    yield {"step": 1, "loss": 0.5}
    yield {"step": 2, "loss": 0.4}
    raise KeyboardInterrupt  # the job is stopped half-way through its rows


WRITERS = {
    "text": lambda path: results.write_text(path, "x" * 1000),
    "json": lambda path: results.write_json(path, {"status": "ok", "samples_per_s": 1.5}),
    "bytes": lambda path: results.write_bytes(path, b"\x89PNG" * 100),
}


@pytest.mark.parametrize("writer", WRITERS, ids=list(WRITERS))
@pytest.mark.usefixtures("disk_fills")
def test_a_write_that_fails_half_way_leaves_no_file_and_no_litter(tmp_path, writer):
    target = tmp_path / "runs" / "bs64_acc1_nw2_seed0_round1.json"
    with pytest.raises(OSError, match="No space"):
        WRITERS[writer](target)
    assert list(target.parent.iterdir()) == []


@pytest.mark.usefixtures("disk_fills")
def test_a_failed_rewrite_keeps_the_whole_old_file(tmp_path):
    target = tmp_path / "recommendation.json"
    target.write_text('{"old": true}\n')
    with pytest.raises(OSError):
        results.write_json(target, {"new": True})
    assert target.read_text() == '{"old": true}\n'
    assert list(tmp_path.iterdir()) == [target]


def test_rows_that_stop_half_way_leave_no_csv(tmp_path):
    target = tmp_path / "bs64.steps.csv"
    with pytest.raises(KeyboardInterrupt):
        results.write_csv(target, _rows_then_fault(), ["step", "loss"])
    assert list(tmp_path.iterdir()) == []
    results.write_csv(target, [{"step": 1, "loss": 0.5}], ["step", "loss"])  # no fault: whole
    assert target.read_text().splitlines() == ["step,loss", "1,0.5"]
    assert list(tmp_path.iterdir()) == [target]
