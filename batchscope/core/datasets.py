"""The dataset catalogue: what the workflow knows of each dataset before any job runs.

No torch: the Snakefile reads it to build the compute-only ceiling's synthetic twin and to cap
the largest-batch search, and the benchmark process (``batchscope.bench.data``) opens the data.
"""

from __future__ import annotations

NAMES = ("fashion_mnist", "cifar10", "imagefolder", "synthetic")

#: Side of the images ``imagefolder`` yields when no ``image_size`` is given.
IMAGEFOLDER_DEFAULT_SIZE = 64

#: Side of the images ``synthetic`` makes when no ``image_size`` is given.
SYNTHETIC_DEFAULT_SIZE = 32

#: Shape of each dataset's images and its classes (imagefolder: its default size and a guess at
#: the classes, for the synthetic twin of the compute-only ceiling).
SHAPES = {
    "fashion_mnist": {"channels": 1, "image_size": 28, "num_classes": 10},
    "cifar10": {"channels": 3, "image_size": 32, "num_classes": 10},
    "imagefolder": {"channels": 3, "image_size": IMAGEFOLDER_DEFAULT_SIZE, "num_classes": 10},
}

#: Samples a ceiling run's synthetic twin has where the split's size is not known beforehand.
UNKNOWN_SPLIT_SAMPLES = 10000

#: Samples in the split each mode reads, where known before any job runs.
SPLIT_SAMPLES = {
    "fashion_mnist": {"train": 60000, "infer": 10000},
    "cifar10": {"train": 50000, "infer": 10000},
}


def native_channels(name: str, synthetic_channels: int | None = None) -> int:
    """Channels a dataset's images have before any expansion (imagefolder is read as RGB)."""
    if name == "synthetic":
        if synthetic_channels is None:
            raise ValueError("synthetic: the channels of its images are needed")
        return int(synthetic_channels)
    return SHAPES[name]["channels"]
