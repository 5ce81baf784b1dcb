"""batchscope.bench.training: the learning-rate schedule as a torch scheduler, gradient
accumulation against one big batch, the per-micro-batch gradient norms of the noise scale."""

import copy

import pytest
import torch
import torch.nn.functional as F

from batchscope.bench import training
from batchscope.bench.steps import PRECISIONS, make_optimizer
from batchscope.core import config as config_module
from batchscope.core import schedules
from tests.factories import make_spec


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


_SETTINGS = config_module.load_schema(config_module.SCHEMA_PATH)["properties"]


@pytest.mark.parametrize("name", _SETTINGS["train"]["properties"]["optimizer"]["enum"])
def test_every_optimizer_the_schema_offers_is_built(name):
    model = torch.nn.Linear(2, 2)
    optimizer = make_optimizer(model, make_spec(train={"optimizer": name}), lr=0.1)
    assert type(optimizer).__name__.lower() == name


def test_the_precisions_the_schema_offers_are_the_ones_the_steps_know():
    assert list(_SETTINGS["compute"]["properties"]["precision"]["enum"]) == list(PRECISIONS)
