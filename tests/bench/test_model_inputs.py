"""The torch-free table of model input sizes (batchscope.core.model_inputs), held to torchvision:
each listed limit is where the model's forward pass starts or stops working."""

import warnings

import pytest
import torch
import torchvision

from batchscope.core import model_inputs as models


def _forward_works(model: torch.nn.Module, side: int) -> bool:
    """A forward pass on the meta device: shapes are checked, nothing is computed."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(torch.empty(2, 3, side, side, device="meta"))
    except (RuntimeError, ValueError, AssertionError, IndexError):
        return False
    return True


def _meta_model(name: str) -> torch.nn.Module:
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torchvision.models.get_model(name, weights=None, num_classes=10).eval()


# one model of each family the table lists (the others share its layers' strides)
MINIMA = ["alexnet", "convnext_tiny", "densenet121", "googlenet", "inception_v3",
          "squeezenet1_0", "squeezenet1_1", "vgg11_bn", "swin_t"]  # fmt: skip


@pytest.mark.parametrize("name", MINIMA)
def test_the_listed_minimum_is_the_smallest_side_the_model_takes(name):
    least = models.MIN_IMAGE_SIZE[name]
    model = _meta_model(name)
    assert _forward_works(model, least)
    assert not _forward_works(model, least - 1)


@pytest.mark.parametrize("name", ["vit_b_32", "maxvit_t"])
def test_an_exact_size_model_takes_that_size_only(name):
    exact = models.EXACT_IMAGE_SIZE[name]
    model = _meta_model(name)
    assert _forward_works(model, exact)
    assert not _forward_works(model, exact + 32) and not _forward_works(model, 64)


def test_an_unlisted_model_takes_small_images():
    assert "resnet18" not in models.MIN_IMAGE_SIZE
    assert _forward_works(_meta_model("resnet18"), 4)


def test_every_listed_name_is_a_torchvision_model():
    known = set(torchvision.models.list_models(module=torchvision.models))
    assert set(models.MIN_IMAGE_SIZE) | set(models.EXACT_IMAGE_SIZE) <= known
