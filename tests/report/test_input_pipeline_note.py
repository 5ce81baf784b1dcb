"""An input-bound recommendation on an image folder names how its images were decoded and
preprocessed, so that a user sees what to change (workers, decoder, resize)."""

import pandas as pd

from batchscope.report.recommend import build
from tests.report.test_recommend import only, rounds

PIPELINE = {"decoder": "pil", "preprocessing": "resize 256 (shorter side), center crop 224"}


def _diagnosis(rows) -> str:
    rec = only(build.recommend(pd.DataFrame(rows)))
    return next(n for n in rec["notes"] if n.startswith("Diagnosis"))


def test_an_input_bound_image_folder_names_its_decoder_and_preprocessing():
    rows = rounds(64, 0, 800.0, data_wait=0.6, **PIPELINE) + rounds(
        64, 2, 900.0, data_wait=0.4, **PIPELINE
    )
    diagnosis = _diagnosis(rows)
    assert diagnosis.startswith("Diagnosis: input-bound")
    assert "(images: decoder pil; resize 256 (shorter side), center crop 224)" in diagnosis
    assert "more workers or another decoder or a cheaper resize/crop may help" in diagnosis


def test_a_compute_bound_run_or_other_data_says_nothing_of_decoders():
    compute = rounds(64, 0, 800.0, data_wait=0.01, **PIPELINE)
    assert "decoder" not in _diagnosis(compute)
    other = rounds(64, 0, 800.0, data_wait=0.6, decoder=None, preprocessing=None)
    diagnosis = _diagnosis(other)
    assert "decoder" not in diagnosis and "a cheaper input pipeline may help" in diagnosis
