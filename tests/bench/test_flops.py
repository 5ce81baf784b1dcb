"""FLOPs per sample and deterministic kernels without torch's compiler: the figures and flags
the job records are those PyTorch's own calls give."""

import functools
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from batchscope.bench import flops, job, measure, models, seeding
from tests.factories import make_spec


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


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("train", [False, True])
def test_the_convolutions_share_is_what_the_conv_layers_count(device, train):
    # the split by operator agrees with FlopCounterMode's split by module: the small CNN's
    # convolutions are all in `features`, its matrix products all in `classifier`
    build = small_cnn(3, 10)
    with torch.device("meta"):
        model = build()
        x = torch.empty(2, 3, 32, 32)
    model.train(train)
    with FlopCounterMode(display=False) as counter:
        out = model(x)
        if train:
            out.sum().backward()
    by_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    counted = flops.count_flops(build, (3, 32, 32), train=train, device=device)
    assert counted.conv_per_sample == by_module["SmallCNN.features"] / 2
    assert counted.per_sample - counted.conv_per_sample == by_module["SmallCNN.classifier"] / 2
    assert 0 < counted.conv_share < 1


def test_a_model_without_convolutions_has_no_conv_share():
    def build():
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))

    assert flops.count_flops(build, (3, 2, 2), train=True, device="cpu").conv_share == 0.0


def _job_result(samples_per_s: float, counted: flops.Flops, device: str, **env) -> dict:
    spec = make_spec("train")
    outcome = {"status": "ok", "samples_per_s": samples_per_s}
    environment = {
        "device_name": "NVIDIA A100-SXM4-80GB",
        "device_capability": "8.0",
        "env": {"OMP_NUM_THREADS": None, "CUDA_VISIBLE_DEVICES": None, "SLURM_JOB_ID": None},
        "packages": {"torch": torch.__version__},
        "fingerprint": "0123456789ab",
        **env,
    }
    context = {
        "env": environment,
        "device": torch.device(device),
        "seeds": {"deterministic": False, "pythonhashseed": 0},
        "work": SimpleNamespace(image_size=32, skipped=0),
        "channels": 3,
    }
    return job._result(spec, outcome, counted, context, threads=1)


def test_an_fp32_cnn_running_near_the_tf32_peak_reads_an_mfu_below_one(monkeypatch):
    # cuDNN runs fp32 convolutions in TF32 by default: at 150 TFLOP/s on an A100 (TF32 peak
    # 156) the old MFU, against the fp32 peak of 19.5, read 7.7
    monkeypatch.setattr(measure, "tf32_allowed", lambda: {"conv": True, "matmul": False})
    all_conv = flops.Flops(per_sample=1e9, conv_per_sample=1e9)
    result = _job_result(150e12 / 1e9, all_conv, "cuda")
    assert result["achieved_tflops"] == pytest.approx(150.0)
    assert result["math_mode"] == "tf32" and result["peak_tflops"] == 156.0
    assert result["mfu"] == pytest.approx(150 / 156)


def test_off_cuda_there_is_no_math_mode_nor_mfu():
    result = _job_result(1000.0, flops.Flops(1e9, 1e9), "cpu")
    assert result["achieved_tflops"] == pytest.approx(1.0)
    assert result["math_mode"] is None and result["peak_tflops"] is None and result["mfu"] is None


def test_flops_on_another_device_is_refused():
    with pytest.raises(ValueError, match="meta device or a CPU copy"):
        flops.flops_per_sample(small_cnn(1, 10), (1, 28, 28), train=False, device="cuda")


@pytest.mark.parametrize("compile", [False, True])
def test_deterministic_kernels_set_what_use_deterministic_algorithms_sets(compile):
    was = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    fill = torch.utils.deterministic.fill_uninitialized_memory
    try:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = True
        seeding.deterministic_kernels(compile=compile)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        # the fill of new memory, which a user's loop does not pay, is off
        assert torch.utils.deterministic.fill_uninitialized_memory is False
    finally:
        torch.use_deterministic_algorithms(was[0], warn_only=was[1])
        torch.utils.deterministic.fill_uninitialized_memory = fill
