"""The measured loop on tiny in-memory data (no dataset files, no Snakemake)."""

import math

import pytest
import torch
from torch.utils.data import TensorDataset

from batchscope.bench import loop, loop_result, measure, models, runner, seeding
from tests.factories import make_spec, settings

CPU = torch.device("cpu")


def _data(n=96, value=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 12, 12, generator=g)
    if value is not None:
        x.fill_(value)
    return TensorDataset(x, torch.randint(0, 4, (n,), generator=g))


def _run(mode="train", batch_size=8, seed=0, data=None, accumulation_steps=1, round=1, **kw):
    kw.setdefault("diagnostic_steps", 0)  # the tests about the breakdown ask for them
    seeding.seed_everything(seed, deterministic=True, compile=kw.get("compile", False))
    model = models.build_model("small_cnn", num_classes=4, in_channels=1)
    spec = make_spec(
        mode,
        batch_size=batch_size,
        accumulation_steps=accumulation_steps,
        seed=seed,
        round=round,
        **settings(mode, **kw),
    )
    data = data if data is not None else _data()
    return runner.run(model, spec, CPU, data, _data(32) if mode == "train" else None)


def test_warmup_steps_are_logged_but_not_measured():
    result, steps = _run(max_steps=7)
    assert result["status"] == "ok"
    assert [s["phase"] for s in steps] == ["warmup"] * 2 + ["measured"] * 5
    assert result["measured_steps"] == 5
    assert result["measured_samples"] == 5 * 8
    measured = [s for s in steps if s["phase"] == "measured"]
    # three windows of the five measured steps (2, 2, 1): the median of their throughputs
    times = [s["step_time_ms"] / 1e3 for s in measured]
    rates = [16 / (times[0] + times[1]), 16 / (times[2] + times[3]), 8 / times[4]]
    assert result["samples_per_s_windows"] == pytest.approx(rates)
    assert result["samples_per_s"] == pytest.approx(sorted(rates)[1])
    assert result["repeats"] == 3
    waits = sum(s["data_wait_ms"] for s in measured) / 1e3
    assert result["data_wait_frac"] == pytest.approx(waits / result["measured_s"])
    assert 0.0 <= result["data_wait_frac"] <= 1.0


def test_batch_size_is_never_changed_and_partial_batches_dropped():
    # 96 samples: 13 full batches per epoch; windows too long to fill, so both epochs run
    result, steps = _run(batch_size=7, epochs=2, min_steps=100)
    assert len(steps) == 2 * 13
    seen = [s["samples_seen"] for s in steps]
    assert all(b - a == 7 for a, b in zip([0, *seen], seen, strict=False))
    assert result["steps_run"] == 26


def test_a_throughput_training_run_ends_once_its_windows_are_full():
    # 12 steps per epoch, 2 epochs planned: 3 windows of 4 measured steps fill after 2 + 12
    result, steps = _run(epochs=2, min_steps=4, repeats=3)
    assert result["steps_run"] == len(steps) == 2 + 12 and result["measured_steps"] == 12
    # the same run towards a target (validating as it trains) does its planned steps
    target, steps = _run(epochs=2, min_steps=4, repeats=3, eval_every_samples=48)
    assert target["steps_run"] == len(steps) == 2 * 12


def test_time_based_windows_hold_at_least_their_seconds():
    result, steps = _run(mode="infer", min_steps=1, min_seconds=0.2, repeats=2)
    measured = [s["step_time_ms"] / 1e3 for s in steps if s["phase"] == "measured"]
    assert sum(measured) >= 2 * 0.2  # the run went on until both windows had their time
    # (where it stops depends on the machine's speed: one pass, or the first step past 0.4 s)


def test_train_records_loss_lr_and_validation_accuracy():
    result, steps = _run(max_steps=6, lr=0.01)
    assert all(s["lr"] == 0.01 and math.isfinite(s["loss"]) for s in steps)
    assert result["final_loss"] == steps[-1]["loss"]
    assert 0.0 <= result["val_accuracy"] <= 1.0
    assert result["loss_used"] == "cross_entropy"  # auto, for a model that takes no labels


def test_infer_has_no_loss_and_no_accuracy():
    result, steps = _run(mode="infer", max_steps=5)
    assert result["status"] == "ok"
    assert result["final_loss"] is None and result["val_accuracy"] is None
    assert result["loss_used"] is None
    assert all(s["loss"] is None for s in steps)


def test_nan_loss_is_recorded_as_diverged():
    result, steps = _run(data=_data(value=float("nan")), max_steps=10)
    assert result["status"] == "diverged"
    assert len(steps) == 1  # stopped at the first non-finite loss
    assert result["samples_per_s"] is None


def test_same_seed_gives_bit_identical_losses_and_another_seed_does_not():
    first = [s["loss"] for s in _run(seed=3, max_steps=6)[1]]
    again = [s["loss"] for s in _run(seed=3, max_steps=6)[1]]
    other = [s["loss"] for s in _run(seed=4, max_steps=6)[1]]
    assert first == again
    assert first != other


def test_too_few_steps_to_measure_is_a_clear_error():
    with pytest.raises(ValueError, match="warm-up"):
        _run(batch_size=64)  # 96 samples -> 1 step, 2 warm-up steps


def test_non_oom_errors_propagate():
    bad = TensorDataset(torch.randn(64, 3, 12, 12), torch.zeros(64, dtype=torch.long))
    with pytest.raises(RuntimeError, match="channels"):
        _run(data=bad, max_steps=4)  # a 1-channel model fed 3 channels is a bug, not a result


def test_window_stats_flags_a_noisy_series_and_not_a_steady_one():
    steady = loop_result.window_stats([10] * 30, [0.010] * 30, repeats=3)
    assert steady["samples_per_s"] == pytest.approx(1000.0)
    assert steady["noisy"] is False and steady["samples_per_s_iqr"] == pytest.approx(0.0)
    # the last window runs at half speed: IQR/median = 0.25 > 0.10
    noisy = loop_result.window_stats([10] * 30, [0.010] * 20 + [0.020] * 10, repeats=3)
    assert noisy["samples_per_s"] == pytest.approx(1000.0)
    assert noisy["samples_per_s_iqr"] == pytest.approx(250.0)
    assert noisy["noisy"] is True
    assert loop_result.window_stats([10] * 5, [0.01] * 5, repeats=1)["noisy"] is None


def test_noisy_judges_three_windows_on_their_range():
    # 1000, 909 and 833 samples/s: an 18% range, though IQR/median is only 9%
    noisy = loop_result.window_stats([1000, 909, 833], [1.0, 1.0, 1.0], repeats=3)
    assert noisy["samples_per_s"] == pytest.approx(909.0)
    assert noisy["noisy"] is True
    quiet = loop_result.window_stats([1000, 970, 950], [1.0, 1.0, 1.0], repeats=3)  # a 5% range
    assert quiet["noisy"] is False


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_every_phase_is_timed_in_the_diagnostic_steps(mode):
    result, steps = _run(mode=mode, max_steps=6, diagnostic_steps=3)
    assert [s["phase"] for s in steps][-4:] == ["measured"] + ["diagnostic"] * 3
    assert result["diagnostic_steps"] == 3 and result["measured_steps"] == 4
    assert result["time_forward_ms"] > 0 and result["time_h2d_ms"] >= 0
    if mode == "train":
        assert result["time_backward_ms"] > 0 and result["time_optimizer_ms"] > 0
    else:
        assert result["time_backward_ms"] is None
    plain, steps = _run(mode=mode, max_steps=6, diagnostic_steps=0)
    assert "diagnostic" not in {s["phase"] for s in steps}
    assert plain["time_forward_ms"] is None and plain["time_other_ms"] is None


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_a_later_round_measures_alike_without_diagnostic_steps_or_validation(mode):
    """What a point needs once (its breakdown, its accuracy) comes from its first round; a
    later round measures the same steps and ends with its windows."""
    first, first_steps = _run(mode=mode, max_steps=6, diagnostic_steps=3)
    later, steps = _run(mode=mode, max_steps=6, diagnostic_steps=3, round=2)
    assert [s["phase"] for s in first_steps][-3:] == ["diagnostic"] * 3
    assert [s["phase"] for s in steps] == ["warmup"] * 2 + ["measured"] * 4
    assert first["diagnostic_steps"] == 3 and first["time_forward_ms"] > 0
    assert later["diagnostic_steps"] == 0 and later["time_forward_ms"] is None
    assert later["phase_diagnostic_s"] == 0
    if mode == "train":
        assert first["val_accuracy"] is not None and first["phase_validation_s"] > 0
        assert later["val_accuracy"] is later["val_samples"] is None
        assert "phase_validation_s" not in later and later["final_loss"] is not None


def test_a_later_round_towards_a_target_still_validates():
    result, steps = _run(
        max_steps=8, round=2, eval_every_samples=32, target_accuracy=0.99, stop_at_target=False
    )
    assert result["val_accuracy"] is not None and result["val_samples"] == 32
    assert steps[-1]["val_accuracy"] == result["val_accuracy"]


def test_infer_stops_within_its_pass_once_each_window_has_its_minimum():
    """A whole pass over the data is no part of the measurement: the windows decide."""
    result, steps = _run(mode="infer", data=_data(n=400), repeats=2, min_steps=3)  # 50 a pass
    assert result["measured_steps"] == 6
    assert [s["phase"] for s in steps] == ["warmup"] * 2 + ["measured"] * 6


def test_infer_runs_past_one_pass_until_each_window_has_its_minimum_steps():
    result, steps = _run(mode="infer", data=_data(n=40), repeats=3, min_steps=6)  # 5 per pass
    assert result["measured_steps"] == 18
    assert len(steps) == 2 + 18


def test_memory_dry_run_is_reported():
    result, _ = _run(max_steps=6)
    assert 0 < result["dry_run_peak_mem_mb"] <= result["peak_mem_mb"]


def test_bf16_autocast_and_channels_last_run_and_are_finite():
    result, steps = _run(max_steps=6, precision="bf16", channels_last=True)
    assert result["status"] == "ok" and all(math.isfinite(s["loss"]) for s in steps)


def test_compile_time_leaves_out_the_first_batchs_wait(monkeypatch):
    monkeypatch.setattr(runner, "COMPILE_BACKEND", "eager")  # inductor needs a compiler and time
    clock = _FakeTime()
    monkeypatch.setattr(loop, "time", clock)
    data = _SlowFirstItem(_data(), clock, seconds=5.0)  # loading the first batch takes 5 s
    result, _ = _run(max_steps=8, compile=True, data=data)
    assert result["status"] == "ok"
    # the fake clock moves only while loading: the step itself takes no time on it
    assert result["first_step_s"] == pytest.approx(5.0)
    assert result["compile_s"] == pytest.approx(0.0)
    plain, _ = _run(max_steps=8, data=_SlowFirstItem(_data(), clock, seconds=5.0))
    assert plain["compile_s"] is None


def test_accumulation_updates_once_per_effective_batch_with_the_scaled_lr():
    result, steps = _run(
        batch_size=8, accumulation_steps=3, lr=0.01, lr_scaling="linear", base_batch_size=8,
        max_steps=4,
    )  # fmt: skip
    assert result["effective_batch_size"] == 24 and result["accumulation_steps"] == 3
    assert [s["samples_seen"] for s in steps] == [24, 48, 72, 96]
    assert result["lr"] == pytest.approx(0.03) and steps[0]["lr"] == pytest.approx(0.03)


def test_warmup_schedule_is_applied_step_by_step():
    _, steps = _run(max_steps=8, lr=0.1, lr_warmup_steps=4)
    lrs = [s["lr"] for s in steps]  # the lr after each update, i.e. the next update's
    assert lrs[:3] == sorted(lrs[:3]) and lrs[0] < 0.1
    assert lrs[3:] == pytest.approx([0.1] * 5)


def test_warmup_in_epochs_is_that_many_epochs_of_updates_and_recorded():
    # 96 samples in batches of 8: 12 updates per epoch, so half an epoch is 6 updates
    result, steps = _run(max_steps=12, lr=0.1, lr_warmup_epochs=0.5)
    assert result["lr_warmup_steps"] == 6
    lrs = [s["lr"] for s in steps]
    assert lrs[:5] == sorted(lrs[:5]) and lrs[4] < 0.1
    assert lrs[5:] == pytest.approx([0.1] * 7)
    plain, _ = _run(max_steps=4, lr=0.1, lr_warmup_steps=3)
    assert plain["lr_warmup_steps"] == 3


def test_batchnorm_layers_are_counted_for_training_only():
    # small_cnn normalises with BatchNorm after each of its two convolutions
    trained, _ = _run(max_steps=4)
    assert trained["batchnorm_layers"] == 2
    inferred, _ = _run("infer", max_steps=4)
    assert inferred["batchnorm_layers"] is None


def test_validation_during_training_is_off_the_clock_and_finds_the_target():
    result, steps = _run(
        max_steps=10, eval_every_samples=24, target_accuracy=0.0, noise_scale_every_steps=2
    )
    evaluated = [s for s in steps if s.get("val_accuracy") is not None]
    assert [s["samples_seen"] for s in evaluated] == [24, 48, 72, 80]  # every 24, and the end
    assert result["target_reached"] is True and result["steps_to_target"] == 3
    assert result["seconds_to_target"] == pytest.approx(steps[2]["elapsed_s"])
    assert result["noise_scale_measurements"] == 5  # before the updates of steps 2, 4, ..., 10
    assert [s["step"] for s in steps if s.get("noise_sq_big") is not None] == [2, 4, 6, 8, 10]


def test_an_unreachable_target_is_reported_not_reached():
    result, _ = _run(max_steps=6, eval_every_samples=16, target_loss=1e-12)
    assert result["target_reached"] is False and result["steps_to_target"] is None


def test_stop_at_target_ends_the_run_at_the_first_evaluation_that_meets_it():
    result, steps = _run(
        max_steps=10, eval_every_samples=24, target_accuracy=0.0, stop_at_target=True
    )
    assert result["stopped_early"] is True and result["steps_run"] == 3 == len(steps)
    assert result["target_reached"] is True and result["steps_to_target"] == 3
    assert result["val_accuracy"] is not None  # the full held-out split, after training
    unreached, steps = _run(
        max_steps=6, eval_every_samples=16, target_loss=1e-12, stop_at_target=True
    )
    assert unreached["stopped_early"] is False and len(steps) == 6


def test_evaluations_during_training_use_the_fixed_subset():
    assert runner.eval_subset(32, 8) == runner.eval_subset(32, 8)  # the same in every run
    assert len(set(runner.eval_subset(32, 8))) == 8
    result, steps = _run(max_steps=6, eval_every_samples=16, eval_samples=8)
    # with 8 of 32 samples every accuracy is a multiple of 1/8, the final one over all 32
    during = [s["val_accuracy"] for s in steps if s.get("val_accuracy") is not None]
    assert len(during) == 3 and all((8 * a) == round(8 * a) for a in during)
    assert result["val_samples"] == 32


# --- the clock, with fakes: what is timed, what is paused, what waits for the device -------


class _FakeTime:
    """A ``time`` module whose clock moves only when a test moves it."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


class _SlowFirstItem(torch.utils.data.Dataset):
    """``data`` whose first item moves the fake clock by ``seconds``."""

    def __init__(self, data, clock, seconds):
        self.data, self.clock, self.seconds, self.first = data, clock, seconds, True

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        if self.first:
            self.clock.now += self.seconds
            self.first = False
        return self.data[i]


def _fake_loop(
    monkeypatch, *, device=CPU, clock=None, step_s=0.010, before=None, after=None, workers=0, **kw
):
    """``measured_loop`` over 8-sample batches with a step that takes ``step_s`` on a fake clock
    (its phases 1, 2, 3 and 4 ms in the diagnostic steps)."""
    clock = clock or _FakeTime()
    monkeypatch.setattr(loop, "time", clock)
    kw.setdefault("diagnostic_steps", 0)
    spec = make_spec("train", batch_size=8, num_workers=workers, **settings("train", **kw))
    loader = torch.utils.data.DataLoader(_data(n=8 * 40), batch_size=8)  # the spec's workers
    # only set how many steps a pause's prefetch reaches: the loader itself has none

    def step_fn(x, y, phases):
        phases.start()
        for ms in (1, 2, 3, 4):  # h2d, forward, backward, optimizer
            clock.now += ms / 1000.0
            phases.mark()
        clock.now += step_s - 0.010
        return torch.tensor(1.0)

    def hook(fn):
        if fn is None:
            return None

        def run(step, seen, x, y):
            out = fn(step)
            if out:
                clock.now += 1.0  # a 1 s pause off the clock
            return out

        return run

    log = loop.StepLog()
    result = loop.measured_loop(
        loader, step_fn, spec, device, log, before_step=hook(before), after_step=hook(after)
    )
    return result, log.rows


def test_a_pause_for_validation_or_noise_is_in_no_steps_time(monkeypatch):
    every_3rd = lambda step: {"val_accuracy": 0.5} if step % 3 == 0 else None  # noqa: E731
    for hooks in ({}, {"before": every_3rd}, {"after": every_3rd}):
        result, steps = _fake_loop(monkeypatch, max_steps=12, **hooks)
        assert [s["step_time_ms"] for s in steps] == pytest.approx([10.0] * 12)
        assert steps[-1]["elapsed_s"] == pytest.approx(0.120)
        assert result["samples_per_s"] == pytest.approx(800.0)


def test_steps_whose_batches_were_prefetched_during_a_pause_are_left_out(monkeypatch):
    # 2 workers × prefetch 2: the step with the pause inside and the 4 after it are out
    at_5 = lambda step: {"noise_sq_big": 1.0} if step == 5 else None  # noqa: E731
    _, steps = _fake_loop(monkeypatch, max_steps=14, before=at_5, workers=2)
    phases = [s["phase"] for s in steps]
    assert phases == ["warmup"] * 2 + ["measured"] * 2 + ["after_pause"] * 5 + ["measured"] * 5
    # without workers nothing is prefetched: only the step the pause fell in
    _, steps = _fake_loop(monkeypatch, max_steps=8, before=at_5)
    assert [s["phase"] for s in steps][3:6] == ["measured", "after_pause", "measured"]


def test_diagnostic_steps_time_the_phases_outside_the_windows(monkeypatch):
    result, steps = _fake_loop(monkeypatch, max_steps=6, step_s=0.012, diagnostic_steps=3)
    assert [s["phase"] for s in steps][-3:] == ["diagnostic"] * 3
    assert result["measured_steps"] == 4 and result["steps_run"] == 9
    assert [result[f"time_{p}_ms"] for p in loop.TRAIN_PHASES] == pytest.approx([1, 2, 3, 4])
    assert result["time_other_ms"] == pytest.approx(2.0)
    assert result["time_runner_ms"] == result["time_data_wait_ms"] == 0.0


def test_worker_startup_is_the_time_to_create_the_iterator(monkeypatch):
    clock = _FakeTime()

    class SlowStart(torch.utils.data.DataLoader):
        def __iter__(self):
            clock.now += 2.0
            return super().__iter__()

    monkeypatch.setattr(loop, "time", clock)
    spec = make_spec("train", batch_size=8, **settings("train", max_steps=4, diagnostic_steps=0))
    loader = SlowStart(_data(), batch_size=8)
    result = loop.measured_loop(loader, lambda x, y, c: None, spec, CPU, loop.StepLog())
    assert result["worker_startup_s"] == pytest.approx(2.0)
    assert result["time_to_first_batch_s"] == pytest.approx(2.0)
    assert result["first_step_s"] == pytest.approx(2.0)  # the first step pays it


class _FakeEvent:
    """torch.cuda.Event on the fake clock: the time the stream reached it."""

    clock = None

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = self.clock.now

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


def test_on_cuda_the_measured_steps_never_wait_for_the_device(monkeypatch):
    syncs = []
    monkeypatch.setattr(loop.measure, "synchronize", lambda device: syncs.append(device))
    monkeypatch.setattr(loop.measure, "peak_memory", lambda device: {"peak_mem_mb": 1.0})
    monkeypatch.setattr(loop, "_to_host", lambda loss: loss)  # no pinned memory here
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    _FakeEvent.clock = clock = _FakeTime()
    cuda = torch.device("cuda")
    result, steps = _fake_loop(monkeypatch, device=cuda, clock=clock, max_steps=30)
    # one synchronisation before the loop and one after it, none per step
    assert len(steps) == 2 + 3 * 5 and len(syncs) == 2
    assert [s["step_time_ms"] for s in steps] == pytest.approx([10.0] * len(steps))
    assert result["samples_per_s"] == pytest.approx(800.0)
    syncs.clear()
    result, steps = _fake_loop(
        monkeypatch, device=cuda, clock=clock, max_steps=30, diagnostic_steps=4
    )
    assert len(syncs) == 2 + 1 + 4  # and one per diagnostic step, after the windows
    assert result["time_backward_ms"] == pytest.approx(3.0)


def test_gpu_utilisation_is_sampled_only_in_measured_steps(monkeypatch):
    class Utilisation:
        active = True

    util = Utilisation()
    states = []
    clock = _FakeTime()
    monkeypatch.setattr(loop, "time", clock)
    spec = make_spec("train", **settings("train", max_steps=6, diagnostic_steps=2))
    loader = torch.utils.data.DataLoader(_data(), batch_size=8)

    def step_fn(x, y, phases):
        states.append(util.active)
        clock.now += 0.01

    loop.measured_loop(loader, step_fn, spec, CPU, loop.StepLog(), utilisation=util)
    assert states == [False, False, True, True, True, True, False, False]
    assert util.active is False


def test_noise_scale_is_measured_on_a_batch_before_its_update(monkeypatch):
    from batchscope.bench import training

    def checksum(model):
        return float(sum(p.detach().double().sum() for p in model.parameters()))

    before_updates = []  # (batch, parameters) as each update found them
    real_train_step = runner.train_step

    def train_step(model, *args, **kwargs):
        step = real_train_step(model, *args, **kwargs)

        def spied(x, y, clock):
            before_updates.append((float(x.sum()), checksum(model)))
            return step(x, y, clock)

        return spied

    measured_on = []
    real_norms = training.gradient_sq_norms

    def spy(model, loss_fn, x, y, **kwargs):
        measured_on.append((float(x.sum()), checksum(model)))
        return real_norms(model, loss_fn, x, y, **kwargs)

    monkeypatch.setattr(runner, "train_step", train_step)
    monkeypatch.setattr(training, "gradient_sq_norms", spy)
    result, _ = _run(max_steps=6, noise_scale_every_steps=2, lr=0.5)
    assert result["noise_scale_measurements"] == 3
    # each measurement saw a batch and the parameters the next update had not yet changed
    assert measured_on == [before_updates[1], before_updates[3], before_updates[5]]


def test_an_effective_batch_of_one_records_the_noise_scale_as_unmeasurable():
    result, _ = _run(batch_size=1, data=_data(n=16), max_steps=6, noise_scale_every_steps=2)
    assert result["status"] == "ok"
    assert result["noise_scale_measurements"] == 0 and result["noise_scale_b_simple"] is None
    assert "effective batch of 1" in result["noise_scale_unmeasured_reason"]
    measured, _ = _run(max_steps=6, noise_scale_every_steps=2)
    assert measured["noise_scale_unmeasured_reason"] is None


@pytest.mark.parametrize("workers", [0, 1])
def test_the_memory_sampling_thread_runs_only_beside_workers(monkeypatch, workers):
    """Without workers there is nothing to sample, and a thread waking 20 times a second
    would only compete with the steps for the cores: one reading after the loop instead."""
    started, readings = [], []
    start, sample = measure.HostMemory.start, measure.HostMemory.sample
    monkeypatch.setattr(measure.HostMemory, "start", lambda self: started.append(1) or start(self))
    monkeypatch.setattr(
        measure.HostMemory, "sample", lambda self: readings.append(1) or sample(self)
    )
    spec = make_spec("infer", num_workers=workers, **settings("infer", max_steps=4))
    model = models.build_model("small_cnn", num_classes=4, in_channels=1)
    result, _ = runner.run(model, spec, CPU, _data())
    assert result["status"] == "ok" and bool(started) == (workers > 0) and readings
    if workers:  # (without workers, a child this test process has left might be counted)
        assert result["workers_uss_mb"] > 0
