"""FLOPs per sample and deterministic kernels without torch's compiler: the figures and flags
the job records are those PyTorch's own calls give."""

import functools

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from batchscope.bench import flops, models, seeding


def flop_counter_mode(build, shape: tuple[int, ...], train: bool) -> float:
    """What the job recorded before it had a CPU count: FlopCounterMode on the meta device."""
    with torch.device("meta"):
        model = build()
        x = torch.empty(2, *shape)
    model.train(train)
    with FlopCounterMode(display=False) as counter:
        if train:
            models.logits_of(model(x)).sum().backward()
        else:
            model(x)
    return counter.get_total_flops() / 2


def small_cnn(channels: int, classes: int):
    return functools.partial(
        models.build_model, models.SMALL_CNN, num_classes=classes, in_channels=channels
    )


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize(
    ("channels", "size", "classes"), [(1, 28, 10), (3, 32, 10), (1, 12, 4), (3, 64, 7), (2, 5, 3)]
)
def test_the_small_cnn_on_a_cpu_copy_counts_what_flop_counter_mode_counts(
    channels, size, classes, train
):
    build = small_cnn(channels, classes)
    expected = flop_counter_mode(build, (channels, size, size), train)
    counted = flops.flops_per_sample(build, (channels, size, size), train=train, device="cpu")
    assert counted == expected > 0
    meta = flops.flops_per_sample(build, (channels, size, size), train=train)
    assert meta == expected


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("train", [False, True])
def test_flop_count_agrees_with_flop_counter_mode_on_torchvision_models(name, train):
    build = functools.partial(models.build_model, name, num_classes=5, in_channels=3)
    expected = flop_counter_mode(build, (3, 32, 32), train)
    assert flops.flops_per_sample(build, (3, 32, 32), train=train, device="cpu") == expected


def test_the_cpu_count_leaves_the_global_rng_as_it_was():
    torch.manual_seed(3)
    before = torch.random.get_rng_state()
    flops.flops_per_sample(small_cnn(1, 10), (1, 28, 28), train=True, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), before)


def test_an_operator_flop_count_leaves_aside_goes_to_flop_counter_mode(monkeypatch):
    # with batch norm's Python split no longer known to be formula-free, the small CNN is
    # counted by FlopCounterMode: the same figure
    monkeypatch.setattr(flops, "_UNSPLIT", frozenset())
    build = small_cnn(1, 10)
    expected = flop_counter_mode(build, (1, 28, 28), True)
    with pytest.raises(flops._Unsupported), flops.FlopCount():
        build()(torch.zeros(2, 1, 28, 28))
    assert flops.flops_per_sample(build, (1, 28, 28), train=True, device="cpu") == expected


def test_flops_on_another_device_is_refused():
    with pytest.raises(ValueError, match="meta device or a CPU copy"):
        flops.flops_per_sample(small_cnn(1, 10), (1, 28, 28), train=False, device="cuda")


@pytest.mark.parametrize("compile", [False, True])
def test_deterministic_kernels_set_what_use_deterministic_algorithms_sets(compile):
    was = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    try:
        torch.use_deterministic_algorithms(False)
        seeding.deterministic_kernels(compile=compile)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
