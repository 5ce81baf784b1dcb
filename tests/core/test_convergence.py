import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from batchscope.bench import training
from batchscope.core import convergence as cv
from batchscope.core import schedules
from batchscope.core.stats import mean_ci

# ---------------------------------------------------------------- learning-rate scaling


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("none", 0.1), ("linear", 0.8), ("sqrt", 0.1 * math.sqrt(8))],
)
def test_scaled_lr_rules(rule, expected):
    assert schedules.scaled_lr(0.1, 32, 256, rule) == pytest.approx(expected, rel=1e-12)


def test_scaled_lr_is_the_base_lr_at_the_base_batch_and_shrinks_below_it():
    for rule in schedules.LR_RULES:
        assert schedules.scaled_lr(0.1, 64, 64, rule) == pytest.approx(0.1)
    assert schedules.scaled_lr(0.1, 64, 16, "linear") == pytest.approx(0.025)
    assert schedules.scaled_lr(0.1, 64, 16, "sqrt") == pytest.approx(0.05)


def test_scaled_lr_rejects_unknown_rule_and_bad_values():
    with pytest.raises(ValueError, match="unknown lr scaling rule 'cubic'"):
        schedules.scaled_lr(0.1, 32, 64, "cubic")
    with pytest.raises(ValueError, match="base_batch_size=0"):
        schedules.scaled_lr(0.1, 0, 64, "linear")


def test_epochs_to_steps():
    assert schedules.epochs_to_steps(5, 100) == 500
    assert schedules.epochs_to_steps(0.1, 10) == 1  # 0.1 * 10 is 1.0000000000000002 in floats
    assert schedules.epochs_to_steps(0.01, 10) == 1  # a warm-up asked for is never lost
    assert schedules.epochs_to_steps(0, 10) == 0
    with pytest.raises(ValueError, match="steps_per_epoch >= 1"):
        schedules.epochs_to_steps(1, 0)


def test_warmup_starts_at_start_lr_and_reaches_peak_linearly():
    kw = {"peak_lr": 0.8, "warmup_steps": 4, "total_steps": 20, "start_lr": 0.1}
    values = [schedules.lr_at(s, **kw) for s in range(6)]
    assert values == pytest.approx([0.1, 0.275, 0.45, 0.625, 0.8, 0.8])


def test_warmup_default_start_is_a_tenth_of_peak():
    assert schedules.lr_at(0, peak_lr=0.5, warmup_steps=10, total_steps=20) == pytest.approx(0.05)
    # no warm-up: the first update already uses the peak
    assert schedules.lr_at(0, peak_lr=0.5, warmup_steps=0, total_steps=20) == 0.5


def test_cosine_decays_from_peak_to_zero_at_total_steps():
    kw = {"peak_lr": 1.0, "warmup_steps": 10, "total_steps": 110, "decay": "cosine"}
    assert schedules.lr_at(10, **kw) == pytest.approx(1.0)
    assert schedules.lr_at(60, **kw) == pytest.approx(0.5)  # half way through the decay
    assert schedules.lr_at(109, **kw) > 0
    assert schedules.lr_at(110, **kw) == 0.0
    assert schedules.lr_at(500, **kw) == 0.0
    decaying = [schedules.lr_at(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(decaying, decaying[1:], strict=False))


def test_constant_keeps_peak_after_warmup():
    kw = {"peak_lr": 0.3, "warmup_steps": 5, "total_steps": 50}
    assert {schedules.lr_at(s, **kw) for s in range(5, 80)} == {0.3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": "step"}, "unknown lr decay 'step'"),
        ({"warmup_steps": 30}, "warmup_steps <= total_steps"),
        ({"start_lr": 2.0}, r"start_lr 2.0 must lie in \[0, peak_lr=1.0\]"),
    ],
)
def test_lr_at_rejects_bad_settings(kwargs, message):
    settings = {"peak_lr": 1.0, "warmup_steps": 5, "total_steps": 20, **kwargs}
    with pytest.raises(ValueError, match=message):
        schedules.lr_at(0, **settings)


@pytest.mark.parametrize("decay", schedules.DECAYS)
def test_lambda_scheduler_follows_lr_at_step_by_step(decay):
    model = torch.nn.Linear(3, 2)
    peak = schedules.scaled_lr(0.05, 32, 256, "linear")
    optimizer = torch.optim.SGD(model.parameters(), lr=peak, momentum=0.9)
    kw = {"warmup_steps": 7, "total_steps": 40, "decay": decay, "start_lr": 0.05}
    scheduler = training.make_scheduler(optimizer, **kw)
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR)
    for step in range(45):
        # the lr the next optimizer.step() will use
        assert optimizer.param_groups[0]["lr"] == pytest.approx(
            schedules.lr_at(step, peak_lr=peak, **kw), rel=1e-12, abs=1e-15
        )
        optimizer.step()
        scheduler.step()


def test_make_scheduler_validates_before_the_first_step():
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="warmup_steps <= total_steps"):
        training.make_scheduler(optimizer, warmup_steps=10, total_steps=5)


# ---------------------------------------------------------------- gradient accumulation


def test_accumulation_steps_divides_exactly():
    assert schedules.accumulation_steps(256, 32) == 8
    assert schedules.accumulation_steps(32, 32) == 1
    with pytest.raises(ValueError) as err:
        schedules.accumulation_steps(100, 32)
    message = str(err.value)
    assert "\n" not in message
    assert "100" in message and "32" in message
    with pytest.raises(ValueError, match="micro-batch size 0"):
        schedules.accumulation_steps(64, 0)


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).double()


def _conv_bn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 5 * 5, 3),
    ).double()


def _data(n: int, shape: tuple[int, ...], seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, *shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=gen)
    return x, y


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def _full_batch_grad(model, x, y) -> tuple[torch.Tensor, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach(), _grads(model).clone()


def _micro(x, y, k):
    return list(zip(x.chunk(k), y.chunk(k), strict=True))


@pytest.mark.parametrize(("make", "shape"), [(_mlp, (6,)), (_conv_bn, (1, 5, 5))])
def test_accumulated_gradient_equals_one_big_batch(make, shape):
    torch.manual_seed(0)
    model = make().eval()  # eval: BatchNorm uses its running statistics, per-sample
    x, y = _data(32, shape)  # k = 4 micro-batches of b = 8
    big_loss, big_grad = _full_batch_grad(model, x, y)
    loss = training.accumulate_gradients(model, F.cross_entropy, _micro(x, y, 4))
    torch.testing.assert_close(_grads(model), big_grad, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(loss, big_loss, rtol=1e-12, atol=1e-14)


def test_accumulation_weights_unequal_micro_batches_by_size():
    torch.manual_seed(1)
    model = _mlp()
    x, y = _data(30, (6,))
    _, big_grad = _full_batch_grad(model, x, y)
    parts = [(x[:8], y[:8]), (x[8:24], y[8:24]), (x[24:], y[24:])]
    training.accumulate_gradients(model, F.cross_entropy, parts)
    torch.testing.assert_close(_grads(model), big_grad, rtol=1e-12, atol=1e-14)


def test_training_mode_batchnorm_differs_per_micro_batch():
    """The documented caveat: BN statistics per micro-batch break the equality."""
    torch.manual_seed(0)
    model = _conv_bn().train()
    x, y = _data(32, (1, 5, 5))
    _, big_grad = _full_batch_grad(model, x, y)
    training.accumulate_gradients(model, F.cross_entropy, _micro(x, y, 4))
    assert not torch.allclose(_grads(model), big_grad, rtol=1e-6, atol=1e-9)


def test_accumulated_step_matches_a_big_batch_step():
    torch.manual_seed(2)
    big, small = _mlp(), _mlp()
    small.load_state_dict(big.state_dict())
    x, y = _data(24, (6,))
    opt_big = torch.optim.SGD(big.parameters(), lr=0.1, momentum=0.9)
    opt_small = torch.optim.SGD(small.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        _full_batch_grad(big, x, y)
        opt_big.step()
        training.accumulated_step(small, F.cross_entropy, _micro(x, y, 3), opt_small)
    for p, q in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- steps to target


def _curve(accuracies, every=10, batch=32, seconds_per_step=0.5):
    """Per-step rows; val_accuracy only every ``every`` steps, as an evaluating runner logs."""
    rows = []
    for step in range(1, every * len(accuracies) + 1):
        evaluated = step % every == 0
        rows.append(
            {
                "step": step,
                "samples_seen": step * batch,
                "elapsed_s": step * seconds_per_step,
                "loss": 1.0 / step,
                "val_accuracy": accuracies[step // every - 1] if evaluated else None,
                "val_loss": 1.0 - accuracies[step // every - 1] if evaluated else float("nan"),
            }
        )
    return rows


def test_steps_to_target_first_evaluation_that_meets_accuracy():
    result = cv.steps_to_target(_curve([0.5, 0.7, 0.8, 0.79, 0.9]), target_accuracy=0.8)
    assert result.reached
    assert (result.steps, result.samples, result.seconds) == (30, 960, 15.0)
    assert result.metric == "val_accuracy"
    assert result.best == 0.8
    assert (result.budget_steps, result.budget_samples, result.budget_seconds) == (50, 1600, 25.0)


def test_steps_to_target_loss_is_met_from_below_and_skips_nan_rows():
    result = cv.steps_to_target(_curve([0.5, 0.7, 0.8]), target_loss=0.35)
    assert result.reached and result.steps == 20 and result.metric == "val_loss"
    train = cv.steps_to_target(_curve([0.5]), target_loss=0.25, metric="loss")
    assert train.steps == 4


def test_steps_to_target_not_reached():
    result = cv.steps_to_target(_curve([0.5, 0.6]), target_accuracy=0.9)
    assert not result.reached
    assert result.steps is result.samples is result.seconds is None
    assert result.best == 0.6
    assert result.budget_steps == 20
    assert result.value("steps") is None and result.budget("seconds") == 10.0


def test_steps_to_target_needs_exactly_one_target():
    with pytest.raises(ValueError, match="exactly one"):
        cv.steps_to_target(_curve([0.5]))
    with pytest.raises(ValueError, match="exactly one"):
        cv.steps_to_target(_curve([0.5]), target_accuracy=0.5, target_loss=0.5)


def test_mean_ci_half_width_uses_the_tabled_t():
    """The interval over seeds: half-width t_{0.975, n-1} s / sqrt(n), t from printed tables."""
    table = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 30: 2.042}
    for df, t in table.items():
        values = [float(i % 3) for i in range(df + 1)]
        mean, low, high = mean_ci(values)
        half = t * float(np.std(values, ddof=1)) / math.sqrt(df + 1)
        assert (high - low) / 2 == pytest.approx(half, rel=2e-4)
        assert mean == pytest.approx(float(np.mean(values)))


def _reached(steps):
    return cv.steps_to_target(_curve([0.1] * (steps // 10 - 1) + [0.9]), target_accuracy=0.9)


def test_seed_summary_mean_and_student_t_interval():
    results = [_reached(s) for s in (100, 120, 140)]
    summary = cv.summarize_seeds(results)
    assert summary.n_seeds == summary.n_reached == 3 and summary.n_not_reached == 0
    assert summary.mean == pytest.approx(120.0)
    half = 4.303 * 20.0 / math.sqrt(3)  # t(0.975, 2) · s / √n
    assert summary.ci95 == pytest.approx((120 - half, 120 + half), abs=0.01)
    assert summary.mean_lower_bound == pytest.approx(120.0)
    seconds = cv.summarize_seeds(results, "seconds")
    assert seconds.mean == pytest.approx(60.0)


def test_seed_summary_one_seed_has_no_interval():
    summary = cv.summarize_seeds([_reached(50)])
    assert summary.mean == 50 and summary.ci95 is None


def test_seed_summary_counts_not_reached_seeds():
    missed = cv.steps_to_target(_curve([0.1] * 30), target_accuracy=0.9)  # ran 300 steps
    summary = cv.summarize_seeds([_reached(100), _reached(140), missed])
    assert (summary.n_seeds, summary.n_reached, summary.n_not_reached) == (3, 2, 1)
    assert summary.mean == pytest.approx(120.0)  # over the seeds that reached it
    assert summary.values == (100.0, 140.0)
    # the missed seed enters at its budget: a lower bound on the true mean
    assert summary.mean_lower_bound == pytest.approx((100 + 140 + 300) / 3)
    none = cv.summarize_seeds([missed])
    assert none.mean is None and none.ci95 is None and none.n_not_reached == 1


# ---------------------------------------------------------------- gradient noise scale


def test_noise_estimates_invert_the_expected_norms():
    g2, trace, b_small, b_big = 5.0, 160.0, 8, 64
    small, big = g2 + trace / b_small, g2 + trace / b_big  # E|G_B|² = |G|² + tr Σ / B
    assert cv.noise_estimates(small, big, b_small, b_big) == pytest.approx((g2, trace))
    with pytest.raises(ValueError, match="batch_small < batch_big"):
        cv.noise_estimates(small, big, 64, 64)


def test_noise_scale_recovers_known_ratio_from_synthetic_gradients():
    rng = np.random.default_rng(0)
    dim, b_small, b_big = 20, 8, 64
    mean_grad = np.full(dim, 0.5)  # |G|² = 5
    variances = np.linspace(2.0, 14.0, dim)  # Σ diagonal, tr Σ = 160
    true_b = variances.sum() / (mean_grad @ mean_grad)  # 32
    estimator = cv.GradientNoiseScale(b_small, b_big, ema_decay=0.995)
    for _ in range(1500):
        per_example = mean_grad + rng.standard_normal((b_big, dim)) * np.sqrt(variances)
        big = per_example.mean(axis=0)
        small = per_example[:b_small].mean(axis=0)  # the data-parallel trick: a slice of big
        estimator.update(small @ small, big @ big)
    assert estimator.b_simple == pytest.approx(true_b, rel=0.10)
    assert estimator.grad_sq_norm == pytest.approx(5.0, rel=0.15)
    assert estimator.trace_cov == pytest.approx(160.0, rel=0.15)
    low, high = estimator.interval()
    assert low < estimator.b_simple < high
    assert low < true_b < high
    fields = estimator.summary()
    assert fields["noise_scale_measurements"] == 1500
    assert fields["noise_scale_b_simple"] == estimator.b_simple


def test_noise_scale_is_the_ratio_of_emas_not_the_ema_of_ratios():
    estimator = cv.GradientNoiseScale(1, 2, ema_decay=0.5)
    # (|G|², tr Σ) per update: (1, 10) then (3, 2); pick norms that give exactly those
    for g2, trace in [(1.0, 10.0), (3.0, 2.0)]:
        estimator.update(g2 + trace, g2 + trace / 2)
    ema_g2, ema_trace = 0.5 * (0.5 * 1.0) + 0.5 * 3.0, 0.5 * (0.5 * 10.0) + 0.5 * 2.0
    assert estimator.b_simple == pytest.approx(ema_trace / ema_g2)  # 3.5 / 1.75 = 2
    ema_of_ratios = 0.5 * (0.5 * 10.0) + 0.5 * (2.0 / 3.0)
    assert estimator.b_simple != pytest.approx(ema_of_ratios)
    # bias-corrected averages: weights 1/3 and 2/3 after two updates at β = 0.5
    assert estimator.grad_sq_norm == pytest.approx(1.0 / 3 + 2.0)


def test_noise_scale_before_and_with_negative_signal():
    estimator = cv.GradientNoiseScale(4, 16)
    assert estimator.b_simple is None and estimator.interval() is None
    assert estimator.summary()["noise_scale_b_simple"] is None
    estimator.update(5.0, 0.5)  # |G|² = (16·0.5 − 4·5)/12 = −1: noise swamps the signal
    estimator.update(5.0, 0.5)
    assert estimator.grad_sq_norm == pytest.approx(-1.0) and estimator.b_simple is None
    assert estimator.interval() == (math.inf, math.inf)


def test_gradient_sq_norms_match_direct_gradients_and_leave_the_model_alone():
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 3)
    ).double()
    model.eval()
    x, y = _data(32, (6,))
    _, g_big = _full_batch_grad(model, x, y)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x[:8]), y[:8]).backward()
    g_small = _grads(model).clone()
    model.zero_grad(set_to_none=True)
    small, big = training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=8)
    assert small == pytest.approx(float(g_small @ g_small), rel=1e-12)
    assert big == pytest.approx(float(g_big @ g_big), rel=1e-12)
    assert all(p.grad is None for p in model.parameters())

    model.train()  # BN updates running stats, dropout draws from the RNG: both must be undone
    stats = model[1].running_mean.clone()
    rng_state = torch.get_rng_state()
    training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=8)
    assert torch.equal(model[1].running_mean, stats)
    assert torch.equal(torch.get_rng_state(), rng_state)
    with pytest.raises(ValueError, match="batch_small < batch_big"):
        training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=32)


def test_gradient_sq_norms_in_micro_batch_chunks_equal_the_whole_passes():
    # what an accumulating run measures with: no pass larger than its micro-batch
    torch.manual_seed(4)
    model = _mlp().double()
    x, y = _data(48, (6,))
    whole = training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=12)
    for chunk in (5, 12, 48):
        chunked = training.gradient_sq_norms(
            model, F.cross_entropy, x, y, batch_small=12, chunk=chunk
        )
        assert chunked == pytest.approx(whole, rel=1e-10)
    passes = []
    handle = model.register_forward_hook(lambda _m, inputs, _o: passes.append(len(inputs[0])))
    training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=12, chunk=5)
    handle.remove()
    assert max(passes) == 5 and sum(passes) == 48


def _sq_norms_direct(model, x, y, batch_small):
    """|G_small|², |G_big|² from ordinary backward passes over x[:batch_small] and x."""
    out = []
    for part in (slice(0, batch_small), slice(None)):
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[part]), y[part]).backward()
        grad = _grads(model)
        out.append(float(grad @ grad))
    return tuple(out)


def test_gradient_sq_norms_hold_train_mode_batchnorm_at_the_whole_batch_statistics():
    # Each part normalised by its own statistics (4 samples here) breaks
    # E|G_b|² = |G|² + tr Σ/b. The reference: the same network with its BatchNorm replaced by
    # the fixed affine map of the whole batch's statistics (eval mode with those as running
    # statistics), whose gradients are means of per-sample gradients.
    torch.manual_seed(5)
    model = _conv_bn()
    model.train()
    x, y = _data(32, (1, 5, 5))
    with torch.no_grad():
        conv_out = model[0](x)
    reference = copy.deepcopy(model)
    norm = reference[1]
    norm.running_mean.copy_(conv_out.mean(dim=(0, 2, 3)))
    norm.running_var.copy_(conv_out.var(dim=(0, 2, 3), correction=0))
    norm.eval()
    expected = _sq_norms_direct(reference, x, y, batch_small=4)

    measured = training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=4)
    assert measured == pytest.approx(expected, rel=1e-10)
    # the per-part statistics would have given another small-batch norm
    assert _sq_norms_direct(model, x, y, 4)[0] != pytest.approx(expected[0], rel=1e-3)
    # chunks pool into the same statistics (the only BatchNorm sees the raw convolution)
    chunked = training.gradient_sq_norms(model, F.cross_entropy, x, y, batch_small=4, chunk=5)
    assert chunked == pytest.approx(expected, rel=1e-10)
    # and the model is its own again: training-mode BatchNorm with batch statistics
    assert "forward" not in model[1].__dict__
    model.zero_grad(set_to_none=True)
    assert _sq_norms_direct(model, x, y, 4)[0] != pytest.approx(expected[0], rel=1e-3)
