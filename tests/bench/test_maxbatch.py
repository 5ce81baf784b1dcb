"""The compute-only ceiling's input (``batchscope.bench.data.DeviceBatches``): batches built
once, on the device, so the ceiling measures the model's compute."""

import json
from dataclasses import replace

import torch

from batchscope.bench import data, job
from tests.factories import make_spec, settings

# --- the compute-only ceiling: batches built once, on the device ------------------------------


class CountingImages(data.SyntheticImages):
    """Synthetic images that count how often an item is read."""

    reads = 0

    def __getitem__(self, index):
        CountingImages.reads += 1
        return super().__getitem__(index)


def test_the_ceiling_reads_no_sample_while_it_steps(tmp_path, monkeypatch):
    opened = data.open_split

    def counting_split(*args, **kwargs):
        split = opened(*args, **kwargs)
        own = split.dataset
        counted = CountingImages(own.num_samples, split.channels, split.image_size, 4)
        return replace(split, dataset=counted)

    monkeypatch.setattr(data, "open_split", counting_split)
    reads, steps = {}, {}
    for max_steps in (4, 10):
        spec = make_spec(
            "infer", kind="ceiling", dataset={"name": "fashion_mnist"},
            **settings("infer", max_steps=max_steps),
        )  # fmt: skip
        path = tmp_path / f"ceiling{max_steps}.spec.json"
        path.write_text(spec.to_json())
        out = tmp_path / f"ceiling{max_steps}"
        CountingImages.reads = 0
        args = [str(path), "--threads", "1", "--output", f"{out}.json", "--steps", f"{out}.csv"]
        assert job.main(args) == 0
        reads[max_steps] = CountingImages.reads
        steps[max_steps] = json.loads(out.with_suffix(".json").read_text())["steps_run"]
    assert steps == {4: 4, 10: 10}
    # six more steps of 8 samples, not one more sample read: the batches were built up front
    assert reads[4] == reads[10] <= data.CEILING_BATCHES * spec.batch_size + 1


def test_device_batches_cycle_a_few_ready_batches_a_loader_would_give():
    images = data.SyntheticImages(100, 1, 4, 3)
    placed = []

    def place(x, y):
        placed.append(x.shape[0])
        return x.to(torch.float64), y

    batches = data.DeviceBatches(images, 16, place)
    assert len(batches) == 100 // 16 and batches.batch_size == 16  # drop_last, as the loader
    assert placed == [16] * data.CEILING_BATCHES  # placed once each, before any step
    epoch = list(batches)
    assert len(epoch) == 6 and len(list(batches)) == 6  # every pass has the loader's length
    assert all(x.dtype == torch.float64 and x.shape == (16, 1, 4, 4) for x, _ in epoch)
    assert epoch[0][0] is epoch[2][0] and epoch[1][0] is epoch[3][0]  # the same tensors again
    assert not torch.equal(epoch[0][0], epoch[1][0])  # distinct samples in each
    assert torch.equal(epoch[1][0][0], images[16][0])
    assert placed == [16] * data.CEILING_BATCHES  # iterating placed nothing more
