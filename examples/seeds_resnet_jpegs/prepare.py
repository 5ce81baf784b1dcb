"""Make what the seeds' story starts from: a folder of JPEGs and a ResNet trained on them.

Writes, beside this file unless ``--out`` says otherwise:

- ``data/jpegs/<class>/<n>.jpg``: RGB JPEGs, one subfolder per class. From the Fashion-MNIST
  files under /usr/share/datasets/fashion-mnist when they are there (Debian's
  dataset-fashion-mnist package), upscaled and coloured; else synthetic images (a shape per
  class on noise). Nothing is downloaded.
- ``data/checkpoint.pt``: a torchvision resnet18 trained briefly on that folder, saved as a
  checkpoint dict holding its ``state_dict`` (as a training script would save it).

The checkpoint's accuracy does not matter to the sweep (speed does not depend on the weights);
it is there so that the sweep loads a real checkpoint, strictly, as it would load yours.

    python examples/seeds_resnet_jpegs/prepare.py                 # about a minute on 2 cores
    python examples/seeds_resnet_jpegs/prepare.py --per-class 12 --steps 2 --out /tmp/x
"""

from __future__ import annotations

import argparse
import gzip
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from torch import nn
from torchvision import transforms

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
CLASSES = [
    "tshirt_top", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "ankle_boot",
]  # fmt: skip


def fashion_mnist_images(per_class: int) -> dict[int, list[np.ndarray]]:
    """The first ``per_class`` 28x28 training images of each class."""
    with gzip.open(FASHION_MNIST / "train-images-idx3-ubyte.gz") as handle:
        images = np.frombuffer(handle.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(FASHION_MNIST / "train-labels-idx1-ubyte.gz") as handle:
        labels = np.frombuffer(handle.read(), np.uint8, offset=8)
    return {c: list(images[labels == c][:per_class]) for c in range(len(CLASSES))}


def synthetic_images(per_class: int, seed: int) -> dict[int, list[np.ndarray]]:
    """A bright square whose place and size depend on the class, on noise: learnable."""
    rng = np.random.default_rng(seed)
    out: dict[int, list[np.ndarray]] = {}
    for c in range(len(CLASSES)):
        out[c] = []
        for _ in range(per_class):
            image = rng.integers(0, 80, (28, 28), dtype=np.uint8)
            top, side = 2 + 2 * (c % 5), 6 + 3 * (c // 5)
            image[top : top + side, top : top + side] = 230
            out[c].append(image)
    return out


def write_jpegs(folder: Path, per_class: int, size: int, source: str, seed: int) -> int:
    """Write the folder of JPEGs; return how many."""
    images = (
        fashion_mnist_images(per_class)
        if source == "fashion-mnist"
        else (synthetic_images(per_class, seed))
    )
    rng = np.random.default_rng(seed)
    count = 0
    for label, grays in images.items():
        (folder / CLASSES[label]).mkdir(parents=True, exist_ok=True)
        for n, gray in enumerate(grays):
            tint = rng.uniform(0.6, 1.0, 3)  # a colour per image: real JPEGs are RGB
            rgb = (gray[..., None] * tint).astype(np.uint8)
            image = Image.fromarray(rgb).resize((size, size), Image.BILINEAR)
            image.save(folder / CLASSES[label] / f"{n:05d}.jpg", quality=90)
            count += 1
    return count


def train(folder: Path, image_size: int, steps: int, batch_size: int, seed: int) -> nn.Module:
    """A resnet18 trained for ``steps`` steps on the folder, as a user's own script would."""
    torch.manual_seed(seed)
    data = torchvision.datasets.ImageFolder(
        str(folder), transforms.Compose([transforms.Resize(image_size), transforms.ToTensor()])
    )
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True)
    model = torchvision.models.resnet18(weights=None, num_classes=len(data.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    step = 0
    while step < steps:
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0 or step == steps:
                print(f"  step {step}/{steps}: loss {loss.item():.3f}", flush=True)
            if step == steps:
                break
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    parser.add_argument("--per-class", type=int, default=100, help="JPEGs per class")
    parser.add_argument("--size", type=int, default=96, help="side of the JPEGs in pixels")
    parser.add_argument("--image-size", type=int, default=32, help="side the model trains on")
    parser.add_argument("--steps", type=int, default=30, help="training steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--source",
        choices=["auto", "fashion-mnist", "synthetic"],
        default="auto",
        help="auto: Fashion-MNIST when its files are there, else synthetic",
    )
    args = parser.parse_args(argv)
    source = args.source
    if source == "auto":
        source = "fashion-mnist" if FASHION_MNIST.is_dir() else "synthetic"
    folder = args.out / "jpegs"
    start = time.perf_counter()
    count = write_jpegs(folder, args.per_class, args.size, source, args.seed)
    print(f"wrote {count} JPEGs ({source}, {args.size} px) to {folder}", flush=True)
    model = train(folder, args.image_size, args.steps, args.batch_size, args.seed)
    checkpoint = args.out / "checkpoint.pt"
    torch.save({"state_dict": model.state_dict(), "classes": sorted(CLASSES)}, checkpoint)
    print(f"wrote {checkpoint} ({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
