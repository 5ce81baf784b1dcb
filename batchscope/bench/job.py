"""One benchmark job: one grid point, read whole from its run spec.

    python -m batchscope.bench specs/runs/train/small_cnn/bs64_acc1_nw2_seed0.json \\
        --threads 2 --output run.json --steps run.steps.csv

Writes the steps CSV, then the result JSON (both atomically). An OOM or a diverged loss is a
result (exit 0); any other error exits non-zero with one line and writes nothing, except in a
largest-batch trial (spec kind ``trial``), where a batch too large for the data is a result too
(``status: too_large_for_data``), and so is a batch the model cannot run for a reason other
than memory (``status: cannot_run``: BatchNorm refusing batch 1, say). A run on several devices
(spec ``devices`` > 1) is one process per device started by torchrun::

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m batchscope.bench SPEC ...

where each rank measures its share and rank 0 alone writes the result; a rank that fails
prints ``batchscope bench: rank R of N: error: ...`` (and torchrun stops the others). A rank
out of memory writes the point's ``oom`` result itself, naming the rank and the step, and
exits with ``RANK_OOM_EXIT``: torchrun stops the others, which wait in an all-reduce it will
never join (``batchscope.bench.torchrun_failure`` then keeps the result). A
compute-only ceiling run (spec kind ``ceiling``) steps over a few batches built on the device
before the clock (``batchscope.bench.data.DeviceBatches``), not a DataLoader. Imports no
plotting library.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from datetime import UTC, datetime

from batchscope.bench.torchrun_failure import RANK_OOM_EXIT
from batchscope.core import results
from batchscope.core.spec import RunSpec, SpecError

#: The status of a trial whose batch leaves no step to measure after its warm-up.
TOO_LARGE_FOR_DATA = results.TOO_LARGE_FOR_DATA
#: The status of a trial whose batch the model cannot run, for a reason other than memory.
CANNOT_RUN = results.CANNOT_RUN
#: How a job's one-line error starts (a rank of a multi-device run names itself).
_ERROR = "batchscope bench: error:"
#: Test hook: the rank this names (``RANK``) dies by SIGKILL once the process group is up.
FAULT_RANK_ENV = "BATCHSCOPE_FAULT_RANK"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench", description=__doc__.split("\n")[0]
    )
    p.add_argument("spec", help="the run spec (JSON, batchscope.core.spec.RunSpec)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--output", required=True, help="result JSON")
    p.add_argument("--steps", required=True, help="per-step CSV")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    prefix = f"batchscope bench: rank {rank} of {world}: error:" if world > 1 else _ERROR
    try:
        spec = RunSpec.read(args.spec)
    except SpecError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return 1
    if spec.devices != world:
        print(
            f"{prefix} the spec is for {spec.devices} device(s) but {world} process(es) run it:"
            f" start it with python -m torch.distributed.run --nproc-per-node {spec.devices}",
            file=sys.stderr,
        )
        return 1
    from batchscope.bench.models import ModelError

    try:
        import_what_the_run_needs(spec)
    except ModelError as exc:  # the model's library is not installed
        print(f"{prefix} {exc}", file=sys.stderr)
        return 1
    from batchscope.bench.data import DatasetError, one_line
    from batchscope.bench.loop import NothingToMeasure
    from batchscope.bench.measure import DeviceError, is_oom

    try:
        return _bench(spec, args)
    except NothingToMeasure as exc:
        if spec.kind == "trial":  # the search's answer for this size, not a failure
            results.write_json(args.output, {"status": TOO_LARGE_FOR_DATA, "error": str(exc)})
            return 0
        print(f"{prefix} {exc}", file=sys.stderr)
        return 1
    except (DeviceError, DatasetError, ModelError) as exc:  # bad input: one line
        print(f"{prefix} {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if spec.kind != "trial" or is_oom(exc):
            if world > 1:  # the line that names the rank, before the traceback
                print(f"{prefix} {type(exc).__name__}: {one_line(exc)}"[:500], file=sys.stderr)
            raise
        # the model refuses this batch: the search's answer for this size, not a failure
        error = f"{type(exc).__name__}: {one_line(exc)}"[:500]
        results.write_json(args.output, {"status": CANNOT_RUN, "error": error})
        print(f"batchscope bench: batch {spec.batch_size} cannot run: {error}", file=sys.stderr)
        return 0


def import_what_the_run_needs(spec: RunSpec) -> None:
    """Import what this run needs, and nothing more, before the job's clock (``wall_s``) starts.

    torch always; torchvision (about a second: it imports ``torch._dynamo``) only for a dataset
    or model read or built through it; ``torch._dynamo`` for training, where torch.optim's
    optimizers import it on their first parameter group and step whatever we do, and for
    ``compute.compile``. For inference of the small CNN on synthetic data it imports neither.
    """
    import torch  # noqa: F401

    from batchscope.bench import data, models

    if data.needs_torchvision(spec.dataset.name):
        import batchscope.bench.images  # noqa: F401
    models.import_for(spec.model_entry)
    if spec.mode == "train" or spec.compute.compile:
        import torch._dynamo  # noqa: F401


def _open_data(spec: RunSpec):
    """The split the mode reads, the held-out split when training validates, and the channels
    the model is fed."""
    from batchscope.bench import data, models
    from batchscope.core import datasets

    dataset = spec.dataset
    validate = spec.train is not None and spec.train.validate
    if dataset.python is not None:
        return _open_python(spec, validate)
    if dataset.tokens is not None:
        return _open_tokens(spec)
    synthetic = dataclasses.asdict(dataset.synthetic) if dataset.synthetic else None
    native = data.native_channels(dataset.name, synthetic)
    channels = models.entry_input_channels(spec.model_entry, native)
    kwargs = {"channels": channels, "image_size": dataset.image_size, "synthetic": synthetic}
    if dataset.val_fraction is not None:
        kwargs["val_fraction"] = dataset.val_fraction
    if dataset.pipeline is not None:
        kwargs["pipeline"] = dataclasses.asdict(dataset.pipeline)
    split = datasets.work_split(dataset.name, spec.mode)
    work = data.open_split(dataset.name, dataset.root, split, **kwargs)
    val = data.open_split(dataset.name, dataset.root, "test", **kwargs) if validate else None
    return work, val, channels


def _open_python(spec: RunSpec, validate: bool):
    """:func:`_open_data` for the user's own Datasets, their items fed as they are (the model
    check refused a training target without a validation Dataset)."""
    from batchscope.bench import models, pydata
    from batchscope.core import datasets

    python = dataclasses.asdict(spec.dataset.python)
    work, val = pydata.open_splits(python, datasets.work_split(spec.dataset.name, spec.mode))
    channels = models.entry_input_channels(spec.model_entry, work.channels or 3)
    return work, val if validate else None, channels


def _open_tokens(spec: RunSpec):
    """:func:`_open_data` for token data: the model's vocabulary and classes decide the ids
    and labels (no channels: the model is fed ids)."""
    from batchscope.bench import models, tokens
    from batchscope.core import datasets

    facts = models.token_facts(spec.model_entry)
    longest = facts["max_positions"]
    if longest is not None and spec.sequence_length > longest:
        raise models.ModelError(
            f"model entry {spec.model}: sequences of {spec.sequence_length} are longer than its"
            f" {longest} positions"
        )
    dataset = spec.dataset
    split = datasets.work_split(dataset.name, spec.mode)
    try:
        work, _ = tokens.open_split(dataset, split, spec.sequence_length, facts)
        val = None
        if spec.train is not None and spec.train.validate:
            val, _ = tokens.open_split(dataset, "test", spec.sequence_length, facts)
    except tokens.TokenError as exc:
        from batchscope.bench.data import DatasetError

        raise DatasetError(str(exc)) from exc
    return work, val, None


def _bench(spec: RunSpec, args: argparse.Namespace) -> int:
    from batchscope.bench.jobtime import JobClock

    clock = JobClock()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")

    import torch

    from batchscope.bench import envinfo, measure, model_check, models, runner, seeding
    from batchscope.bench.load import ForeignLoad

    env = envinfo.runtime(spec.device)  # before threads and seeds are set: the environment as given
    device = measure.resolve_device(spec.device)
    group = None
    if spec.devices > 1:
        from batchscope.bench import ddp

        group, device = ddp.start(device)
        _injected_fault(group.rank)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if args.threads:
        # the job's threads are shared by the ranks on this node
        per_rank = args.threads // group.local_world_size if group else args.threads
        torch.set_num_threads(max(1, min(per_rank, affinity)))
    seeds = seeding.seed_everything(
        spec.seed, deterministic=spec.deterministic, compile=spec.compute.compile
    )
    clock.lap("setup")
    work, val, channels = _open_data(spec)
    sample = work.dataset[0][0]
    side = sample.shape[-1] if sample.dim() == 3 else None  # images: C x H x W
    clock.lap("data")

    def build():
        return models.build(
            spec.model_entry, num_classes=work.num_classes, in_channels=channels, image_size=side
        )

    model = build()
    models.load_weights(model, spec.model_entry)
    clock.lap("model")
    flops = model_check.count_flops(
        spec.model_entry, build, tuple(sample.shape), train=spec.mode == "train", dtype=sample.dtype
    )
    clock.lap("flops")
    print(
        f"batchscope bench: {spec.mode} {spec.model} on {spec.dataset.name},"
        f" sequence_length={spec.sequence_length} batch_size={spec.batch_size}"
        f" accumulation_steps={spec.accumulation_steps}"
        f" num_workers={spec.num_workers} devices={spec.devices} seed={spec.seed}"
        f" device={device} threads={torch.get_num_threads()} env={env['fingerprint']}",
        file=sys.stderr,
    )
    batches = _ceiling_batches(spec, device, work.dataset) if spec.kind == "ceiling" else None
    with ForeignLoad() as foreign:
        clock.lap("prepare")
        outcome, steps = runner.run(
            model, spec, device, work.dataset, val.dataset if val else None,
            batches=batches, group=group,
        )  # fmt: skip
        clock.skip()  # the loop's phases and the validation's are the runner's
    context = {"env": env, "device": device, "seeds": seeds, "work": work, "channels": channels}
    context["started_at"] = started_at
    context["phases"] = {k: outcome.pop(k) for k in list(outcome) if k.startswith("phase_")}
    outcome.update(foreign.fields())
    if group is not None:
        context["foreign"] = foreign
        measured = (outcome, steps)
        return _finish_distributed(spec, args, group, measured, flops, context, model, clock)
    # after the validation pass too, the allocator's cache still held: the search's judgement
    peak_mb = measure.cuda_peak_device_mb(device)
    result = _full_result(spec, outcome, flops, context, model, peak_mb)
    _write(args, result, steps, clock, context["phases"])
    summary = {k: result[k] for k in ("status", "samples_per_s", "peak_mem_mb", "val_accuracy")}
    print(f"batchscope bench: done {json.dumps(summary)}", file=sys.stderr)
    return 0


def _injected_fault(rank: int) -> None:
    """The test hook: die as a lost process does, with no line and no clean-up."""
    if os.environ.get(FAULT_RANK_ENV) == str(rank):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _write(args: argparse.Namespace, result: dict, steps: list[dict], clock, phases) -> None:
    """Write the steps CSV, then the result with the job's clock: ``wall_s`` up to the
    files, ``process_s`` and the phases (``batchscope.bench.jobtime``) up to the result's."""
    result["wall_s"] = clock.elapsed_s()
    clock.skip()
    results.write_csv(args.steps, steps, results.STEP_COLUMNS)
    clock.lap("write")
    result.update(clock.fields(phases))
    results.write_json(args.output, result)


def _full_result(spec, outcome: dict, flops, context: dict, model, cuda_peak_mb) -> dict:
    """:func:`_result` with the model's fields, the device's peak and the start time."""
    import torch

    from batchscope.bench import models

    result = _result(spec, outcome, flops, context, torch.get_num_threads())
    result.update(models.result_fields(spec.model_entry, model))
    result["cuda_peak_device_mb"] = cuda_peak_mb
    result["started_at"] = context["started_at"]
    return result


def _finish_rank_oom(spec, args, group, measured, flops, context, model, clock) -> int:
    """This rank ran out of memory: it writes the point's ``oom`` result, naming itself and the
    step, from its own measurement, then exits with ``RANK_OOM_EXIT`` at once. Its peers wait
    in an all-reduce it will never join (a gather, or the gradients' inside a step): torchrun
    stops them once it has exited, and the workflow keeps the result. Nothing here waits for
    another rank. Should several ranks run out, the result is the last one's to be written."""
    from batchscope.bench import measure

    outcome, steps = measured
    where = f"rank {group.rank} of {group.world_size}"
    if outcome.get("oom_step") is not None:
        where += f", step {outcome['oom_step']}"
    outcome["error"] = f"{where}: {outcome['error']}"[:500]
    outcome.update(world_size=group.world_size, oom_rank=group.rank)
    peak_mb = measure.cuda_peak_device_mb(context["device"])
    result = _full_result(spec, outcome, flops, context, model, peak_mb)
    _write(args, result, steps, clock, context["phases"])
    print(f"batchscope bench: out of memory: {outcome['error']}", file=sys.stderr)
    return RANK_OOM_EXIT


def _finish_distributed(spec, args, group, measured, flops, context, model, clock) -> int:
    """Gather every rank's measurement on rank 0, which writes the result; the others write
    nothing. A rank out of memory writes the result itself (:func:`_finish_rank_oom`)."""
    from batchscope.bench import ddp, measure

    outcome, steps = measured
    if outcome["status"] == "oom":
        return _finish_rank_oom(spec, args, group, measured, flops, context, model, clock)
    mine = {key: outcome.get(key) for key in ddp.GATHERED}
    mine["cuda_peak_device_mb"] = measure.cuda_peak_device_mb(context["device"])
    mine["own_cpu_s"], mine["host"] = context["foreign"].own_s, os.uname().nodename
    ranks = group.gather(mine)
    ddp.stop()
    if not group.leader:
        return 0
    outcome.update(ddp.combine(outcome, ranks, group))
    foreign = context["foreign"]
    if foreign.foreign_cpu_s is not None:  # the other ranks on this machine are not foreign
        siblings = [r["own_cpu_s"] or 0.0 for r in ranks[1:] if r["host"] == ranks[0]["host"]]
        foreign.discount(foreign.foreign_cpu_s - sum(siblings))
        outcome.update(foreign.fields())
    peaks = [r["cuda_peak_device_mb"] for r in ranks if r["cuda_peak_device_mb"] is not None]
    result = _full_result(spec, outcome, flops, context, model, max(peaks) if peaks else None)
    _write(args, result, steps, clock, context["phases"])
    summary = {k: result[k] for k in ("status", "samples_per_s", "samples_per_s_per_rank")}
    print(f"batchscope bench: done {json.dumps(summary)}", file=sys.stderr)
    return 0


def _ceiling_batches(spec: RunSpec, device, dataset):
    """The compute-only ceiling's input: a few batches on the device, built before the clock."""
    from batchscope.bench.data import DeviceBatches
    from batchscope.bench.steps import to_device

    return DeviceBatches(
        dataset, spec.effective_batch_size, lambda x, y: to_device(x, y, device, spec)
    )


def _result(spec: RunSpec, outcome: dict, flops, context: dict, threads: int) -> dict:
    """One run's result: the grid point, what the loop measured and the settings it ran with
    (the result format: docs/results.md)."""
    from batchscope.bench import measure

    env, device, work = context["env"], context["device"], context["work"]
    precision = spec.compute.precision
    achieved = (
        flops.per_sample * outcome["samples_per_s"] / 1e12 if outcome["samples_per_s"] else None
    )
    cuda = device.type == "cuda"
    math_mode = peak = None
    if cuda:  # the modes torch's flags give now, as they were during the run
        modes = measure.math_modes(precision, env["device_capability"])
        math_mode, peak = measure.compute_peak(env["device_name"], modes, flops.conv_share)
        peak = spec.measure.peak_tflops or peak
    return {
        "schema_version": results.SCHEMA_VERSION,
        "mode": spec.mode,
        "model": spec.model,
        "dataset": spec.dataset.name,
        "sequence_length": spec.sequence_length,
        "batch_size": spec.batch_size,
        "accumulation_steps": spec.accumulation_steps,
        "num_workers": spec.num_workers,
        "devices": spec.devices,
        "seed": spec.seed,
        "round": spec.round,
        "world_size": outcome.pop("world_size", 1),
        # the rank out of memory: 0 on one device
        "oom_rank": outcome.pop("oom_rank", 0 if outcome["status"] == "oom" else None),
        "global_batch_size": spec.global_batch_size,
        "samples_per_s_per_rank": outcome.pop(
            "samples_per_s_per_rank",
            None if outcome["samples_per_s"] is None else [outcome["samples_per_s"]],
        ),
        "device": str(device),
        "device_name": env["device_name"],
        **outcome,
        "tokens_per_s": _tokens_per_s(spec, outcome["samples_per_s"]),
        "flops_per_sample": flops.per_sample,
        "achieved_tflops": achieved,
        "math_mode": math_mode,
        "peak_tflops": peak,
        "mfu": achieved / peak if achieved and peak else None,
        "precision": precision,
        "channels_last": spec.compute.channels_last,
        "compile": spec.compute.compile,
        "image_size": work.image_size,
        "channels": context["channels"],
        "images_skipped": work.skipped,
        **_pipeline_fields(spec),
        "epochs": spec.train.epochs if spec.train else 1,
        "max_steps": spec.max_steps,
        "short_run": spec.short,
        "optimizer": spec.train.optimizer if spec.train else None,
        "torch_threads": threads,
        "omp_num_threads": env["env"]["OMP_NUM_THREADS"],
        "cuda_visible_devices": env["env"]["CUDA_VISIBLE_DEVICES"],
        "slurm_job_id": env["env"]["SLURM_JOB_ID"],
        **dataclasses.asdict(spec.loader),
        "deterministic": context["seeds"]["deterministic"],
        "pythonhashseed": context["seeds"]["pythonhashseed"],
        "cpu_memory_budget_mb": spec.cpu_memory_budget_mb,
        "env_fingerprint": env["fingerprint"],
        "torch_version": env["packages"]["torch"],
    }


def _pipeline_fields(spec: RunSpec) -> dict:
    """An image folder's decoder and preprocessing, as a result records them."""
    from batchscope.core import datasets

    pipeline = spec.dataset.pipeline
    if pipeline is None:
        return {"decoder": None, "preprocessing": None}
    text = datasets.preprocessing_text(pipeline.resize, pipeline.crop, pipeline.normalize)
    if pipeline.resize is None and pipeline.crop is None:  # image_size's square resize
        size = spec.dataset.image_size or datasets.IMAGEFOLDER_DEFAULT_SIZE
        text = datasets.preprocessing_text([size, size], None, pipeline.normalize)
    return {"decoder": pipeline.decoder, "preprocessing": text}


def _tokens_per_s(spec: RunSpec, samples_per_s: float | None) -> float | None:
    """Token ids a second: every position of every sample (token data has no padding)."""
    if spec.sequence_length is None or samples_per_s is None:
        return None
    return samples_per_s * spec.sequence_length


def exit_without_teardown(code: int) -> None:
    """End the process once its results are on disk, skipping the interpreter's teardown of
    torch's thousands of modules (about a second per job here, paid by every grid point).

    When a child process is still alive (a DataLoader worker, say), exit normally instead, so
    that the usual shutdown stops it rather than leaving it behind.
    """
    import multiprocessing

    if multiprocessing.active_children():
        sys.exit(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
