"""An image folder's preprocessing as a service does it: resize, centre crop, normalize, and
the decoder (PIL, or torchvision.io on the file's bytes)."""

import io
from pathlib import Path

import pytest
import torch
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from batchscope.bench.data import open_split
from batchscope.bench.fetch import prepare
from batchscope.bench.images import decode, pipeline_transform
from batchscope.core import datasets


def smooth_image(width: int, height: int) -> Image.Image:
    """A smooth RGB picture (gradients), on which two JPEG decoders agree closely."""
    x = torch.linspace(0, 1, width).expand(height, width)
    y = torch.linspace(0, 1, height).unsqueeze(1).expand(height, width)
    rgb = torch.stack([x, y, (x + y) / 2]) * 255
    return Image.fromarray(rgb.permute(1, 2, 0).round().to(torch.uint8).numpy())


@pytest.fixture
def jpeg(tmp_path) -> Path:
    path = tmp_path / "photo.jpg"
    smooth_image(80, 60).save(path, quality=95)
    return path


def test_the_torchvision_decoder_reads_the_file_as_the_pil_decoder_does(jpeg):
    pil = decode(str(jpeg), "pil")
    tensor = decode(str(jpeg), "torchvision")
    assert isinstance(pil, Image.Image) and isinstance(tensor, torch.Tensor)
    assert tensor.dtype == torch.uint8 and tensor.shape == (3, 60, 80)
    as_tensor = pil_to_tensor(pil)
    assert (as_tensor.int() - tensor.int()).abs().float().mean() < 2  # levels of 255


def test_both_decoders_give_the_same_shape_and_close_pixels_after_the_pipeline(jpeg):
    pipeline = {"resize": 40, "crop": 32, "normalize": None}
    transform = pipeline_transform(64, pipeline)
    pil = transform(decode(str(jpeg), "pil"))
    tv = transform(decode(str(jpeg), "torchvision"))
    assert pil.shape == tv.shape == (3, 32, 32)
    assert type(pil) is torch.Tensor and type(tv) is torch.Tensor  # plain tensors: collate
    assert pil.dtype == tv.dtype == torch.float32
    assert (pil - tv).abs().mean() < 0.02  # PIL's and torch's antialiased resize, [0, 1]


def test_resize_keeps_the_aspect_then_the_crop_takes_the_centre(jpeg):
    image = decode(str(jpeg), "torchvision")  # 60 x 80
    resized = pipeline_transform(64, {"resize": 30})(image)
    assert resized.shape == (3, 30, 40)  # shorter side 30, aspect kept
    cropped = pipeline_transform(64, {"resize": 30, "crop": 20})(image)
    assert torch.allclose(cropped, resized[:, 5:25, 10:30])
    exact = pipeline_transform(64, {"resize": [24, 24]})(image)
    assert exact.shape == (3, 24, 24)
    assert pipeline_transform(16, None)(image).shape == (3, 16, 16)  # image_size, as before


@pytest.mark.parametrize("normalize", ["imagenet", {"mean": [0.5, 0.4, 0.3], "std": [2, 4, 8]}])
def test_normalize_subtracts_the_mean_and_divides_by_the_spread(jpeg, normalize):
    image = decode(str(jpeg), "pil")
    plain = pipeline_transform(16, None)(image)
    normed = pipeline_transform(16, {"normalize": normalize})(image)
    values = datasets.normalize_values(normalize)
    mean = torch.tensor(values["mean"]).view(3, 1, 1)
    std = torch.tensor(values["std"]).view(3, 1, 1)
    assert torch.allclose(normed, (plain - mean) / std, atol=1e-6)


def test_an_image_folder_opens_with_its_pipeline_and_decoder(tmp_path):
    tree = tmp_path / "photos"
    for label in ("a", "b"):
        (tree / label).mkdir(parents=True)
        for i in range(3):
            smooth_image(50 + i, 40).save(tree / label / f"{i}.jpg")
        buffer = io.BytesIO()
        smooth_image(45, 45).save(buffer, format="PNG")  # not a JPEG: decode_image
        (tree / label / "p.png").write_bytes(buffer.getvalue())
    root = tmp_path / "prepared"
    prepare("imagefolder", root, path=tree, log=lambda line: None)
    pipeline = {"resize": 36, "crop": 32, "normalize": "imagenet", "decoder": "torchvision"}
    split = open_split("imagefolder", root, "all", pipeline=pipeline)
    assert split.image_size == 32 and len(split.dataset) == 8
    shapes = {tuple(split.dataset[i][0].shape) for i in range(len(split.dataset))}
    assert shapes == {(3, 32, 32)}
    pil = open_split("imagefolder", root, "all", pipeline={**pipeline, "decoder": "pil"})
    assert (pil.dataset[0][0] - split.dataset[0][0]).abs().mean() < 0.1  # normalized units


def test_a_file_the_torchvision_decoder_cannot_read_is_one_line(tmp_path):
    from batchscope.bench.data import DatasetError
    from batchscope.bench.images import IndexedImages

    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff" + b"not a jpeg" * 10)
    images = IndexedImages([(str(bad), 0)], pipeline_transform(8), "torchvision")
    with pytest.raises(DatasetError, match=r"imagefolder: cannot decode .*bad\.jpg") as caught:
        images[0]
    assert "\n" not in str(caught.value)
