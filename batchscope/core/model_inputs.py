"""The input sizes each built-in and torchvision model accepts, known before any job runs.

No torch: the config check reads it, so that a sweep feeding ``inception_v3`` 64 px images stops
with one line before its first job instead of a shape error inside one.
(``batchscope.bench.models`` builds the models; a test there holds this table to torchvision.)
"""

from __future__ import annotations

#: Smallest square input side (px) a model's layers can take; a model not listed takes any size
#: the schema allows. (Where torchvision states a ``min_size`` for a model's weights it is the
#: same, except Swin's, which is that of the weights' training, not of the layers.)
MIN_IMAGE_SIZE = {
    "alexnet": 63,
    "googlenet": 15,
    "inception_v3": 75,
    "squeezenet1_0": 21,
    "squeezenet1_1": 17,
    **{f"convnext_{size}": 32 for size in ("tiny", "small", "base", "large")},
    **{f"densenet{depth}": 29 for depth in (121, 161, 169, 201)},
    **{f"vgg{depth}{bn}": 32 for depth in (11, 13, 16, 19) for bn in ("", "_bn")},
    **{f"swin_{v}{size}": 4 for v in ("", "v2_") for size in ("t", "s", "b")},
}

#: Models built for one input side only (their position embeddings or attention windows are
#: fixed at construction).
EXACT_IMAGE_SIZE = {
    "maxvit_t": 224,
    **{f"vit_{name}": 224 for name in ("b_16", "b_32", "l_16", "l_32", "h_14")},
}


def input_size_problem(model: str, image_size: int) -> str | None:
    """Why ``model`` cannot take ``image_size`` px square images, in a few words; None if it can."""
    exact = EXACT_IMAGE_SIZE.get(model)
    if exact is not None and image_size != exact:
        return f"{model} takes images of exactly {exact} px, not {image_size}"
    least = MIN_IMAGE_SIZE.get(model)
    if least is not None and image_size < least:
        return f"{model} needs images of at least {least} px, not {image_size}"
    return None
