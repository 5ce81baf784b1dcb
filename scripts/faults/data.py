"""Faults in the data: an unreadable image in an image folder (random bytes, or a PNG cut in
half), each on a fresh one-point sweep of a tiny image folder; and a broken dataset mirror (a
truncated gzip, a file whose checksum does not match) met when the dataset is fetched again
(its cache gone) for the one point that still has to run."""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil

from batchscope.core import paths
from faults.harness import MEASURE, READS_ANSWER, Folder, Row, Suite, observe
from tests.factories import NO_RACE
from tests.workflow.helpers import DEBIAN_FMNIST, write_config

#: The mirror's file a case breaks: Fashion-MNIST's training labels (small, and checked).
LABELS = "train-labels-idx1-ubyte.gz"


def image_folder(root, broken: bytes) -> None:
    """Two classes of six 20 x 20 PNGs, and ``broken.png`` among the dogs."""
    from PIL import Image

    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (20, 20), (40 * i, 10, 200)).save(root / label / f"{i}.png")
    (root / "dog" / "broken.png").write_bytes(broken)


def png_cut_in_half() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.effect_noise((20, 20), 50).convert("RGB").save(buffer, format="PNG")
    whole = buffer.getvalue()
    return whole[: len(whole) // 2]


def _image_case(suite: Suite, case: str, title: str, broken: bytes) -> Row:
    root = suite.fresh(case)
    image_folder(root / "images", broken)
    config = {
        "dataset": {"name": "imagefolder", "path": str(root / "images"), "image_size": 16},
        "models": ["small_cnn"],
        "modes": ["infer"],
        "batch_sizes": [4],
        "num_workers": [0],
        "seeds": [0],
        "measure": MEASURE,
        "sweep": NO_RACE,
    }
    folder = Folder(root, write_config(root, **config))
    point = folder.point("infer", 4)

    row = observe(
        title, folder, lambda: folder.run("--cores", "2"), points=[point],
        sees=lambda run: folder.answer_line(r"unreadable image"), how=READS_ANSWER,
    )  # fmt: skip
    result = root / point
    if result.exists():
        row.status += f", images_skipped {json.loads(result.read_text())['images_skipped']}"
    return row


def corrupt_image(suite: Suite) -> Row:
    broken = b"\x89PNG\r\n\x1a\n" + random.Random(0).randbytes(300)
    return _image_case(suite, "corrupt-image", "a corrupt image in the image folder", broken)


def truncated_image(suite: Suite) -> Row:
    title = "a truncated image in the image folder"
    return _image_case(suite, "truncated-image", title, png_cut_in_half())


def _mirror_case(suite: Suite, case: str, title: str, content: bytes) -> Row:
    """The dataset's cache is gone and one point has to run: the fetch meets ``content`` as
    the mirror's ``LABELS``; fixed, the rerun fetches it and runs that point."""
    folder = suite.copy("single", case)
    point = folder.drop("train", 16)
    shutil.rmtree(folder.path / paths.DATASET_DIR.format(dataset="fashion_mnist"))
    link = suite.mirror / LABELS

    def fix() -> None:
        link.unlink(missing_ok=True)
        link.symlink_to(DEBIAN_FMNIST / LABELS)

    link.unlink()
    link.write_bytes(content)
    try:
        return observe(
            title, folder, lambda: folder.run("--cores", "2"), points=[point], fix=fix,
            setup_touched=["download_dataset"],
            how="met by a fetch after the dataset's cache was deleted, one point left to run",
        )  # fmt: skip
    finally:
        if not link.is_symlink():
            fix()


def truncated_archive(suite: Suite) -> Row:
    whole = (DEBIAN_FMNIST / LABELS).read_bytes()
    title = "a truncated dataset archive (gzip cut in half)"
    return _mirror_case(suite, "truncated-archive", title, whole[: len(whole) // 2])


def checksum_mismatch(suite: Suite) -> Row:
    labels = bytearray(gzip.decompress((DEBIAN_FMNIST / LABELS).read_bytes()))
    labels[-1] = (labels[-1] + 1) % 10  # one label changed: a whole gzip, another md5
    title = "a dataset file whose checksum does not match"
    return _mirror_case(suite, "checksum", title, gzip.compress(bytes(labels)))


#: The cases of this family, by the name ``--cases`` takes.
CASES = {
    "corrupt-image": corrupt_image,
    "truncated-image": truncated_image,
    "truncated-archive": truncated_archive,
    "checksum": checksum_mismatch,
}
