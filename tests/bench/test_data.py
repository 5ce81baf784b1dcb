"""Tests of batchscope.bench.fetch and .data: verified, cached, atomic prepare; splits that load."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import pickle
import random
import shutil
import struct
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image
from torchvision.datasets.utils import calculate_md5

from batchscope.bench import fetch
from batchscope.bench.data import DatasetError, open_split
from batchscope.bench.fetch import DownloadSpec, FileSpec, prepare
from batchscope.core import datasets, folder_index
from batchscope.core.results import read_json

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = [f.filename for f in fetch.SPECS["fashion_mnist"].files]
needs_debian_fashion = pytest.mark.skipif(
    not all((DEBIAN_FASHION / name).is_file() for name in FASHION_FILES),
    reason=f"Debian package dataset-fashion-mnist not installed ({DEBIAN_FASHION} lacks files)",
)


class Log(list):
    """A ``log`` callable that keeps the lines."""

    def __call__(self, line: str) -> None:
        assert "\n" not in line
        self.append(line)


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def assert_nothing_left(tmp_path: Path, root: Path) -> None:
    """A failed prepare leaves no file in root and no staging folder beside it."""
    assert files_under(root) == []
    assert [p.name for p in root.parent.iterdir() if ".partial-" in p.name] == []


# ------------------------------------------------------------------------------- fashion_mnist


@pytest.fixture(scope="module")
def fashion_root(tmp_path_factory) -> Path:
    """Fashion-MNIST prepared once from the Debian copy, shared by the read-only tests."""
    root = tmp_path_factory.mktemp("fashion") / "data root"
    prepare("fashion_mnist", root, mirrors=[str(DEBIAN_FASHION)], log=Log())
    return root


@needs_debian_fashion
def test_fashion_mnist_prepares_loads_and_is_cached(fashion_root):
    raw = fashion_root / "FashionMNIST" / "raw"
    names = sorted(p.name for p in raw.iterdir())
    assert names == sorted(name.removesuffix(".gz") for name in FASHION_FILES)

    train = open_split("fashion_mnist", fashion_root, "train")
    test = open_split("fashion_mnist", fashion_root, "test")
    assert (len(train.dataset), len(test.dataset)) == (60000, 10000)
    image, label = train.dataset[0]
    assert image.dtype == torch.float32 and image.shape == (1, 28, 28)
    assert isinstance(label, int)
    for split in (train, test):
        assert split.dataset.targets.min() == 0 and split.dataset.targets.max() == 9
        assert (split.num_classes, split.channels, split.image_size, split.skipped) == (
            10,
            1,
            28,
            0,
        )

    mtimes = {p: p.stat().st_mtime_ns for p in raw.iterdir()}
    log = Log()
    assert prepare("fashion_mnist", fashion_root, mirrors=["/no/such/mirror/"], log=log)
    assert any("cached" in line for line in log)
    assert {p: p.stat().st_mtime_ns for p in raw.iterdir()} == mtimes


@needs_debian_fashion
def test_fashion_mnist_channels_and_size(fashion_root):
    split = open_split("fashion_mnist", fashion_root, "test", channels=3, image_size=32)
    image, _ = split.dataset[0]
    assert image.shape == (3, 32, 32) and (split.channels, split.image_size) == (3, 32)
    assert torch.equal(image[0], image[2])
    with pytest.raises(DatasetError, match="cannot turn 1-channel images into 2 channels"):
        open_split("fashion_mnist", fashion_root, "test", channels=2)


@needs_debian_fashion
def test_fashion_mnist_falls_back_to_next_mirror(tmp_path):
    copy = tmp_path / "mirror with space"
    shutil.copytree(DEBIAN_FASHION, copy)
    root = tmp_path / "root"
    log = Log()
    prepare("fashion_mnist", root, mirrors=[str(tmp_path / "missing"), copy.as_uri()], log=log)
    assert open_split("fashion_mnist", root, "test").dataset[9999][0].shape == (1, 28, 28)
    assert sum("missing" in line for line in log) == len(FASHION_FILES)


def write_fake_mirror(folder: Path, content: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True)
    for name, raw in content.items():
        (folder / name).write_bytes(raw)
    return folder


def test_fashion_mnist_md5_mismatch_leaves_nothing(tmp_path):
    wrong = gzip.compress(b"not fashion-mnist")
    mirror = write_fake_mirror(tmp_path / "bad", {name: wrong for name in FASHION_FILES})
    root = tmp_path / "root"
    with pytest.raises(DatasetError, match="md5 mismatch: expected f4a8712d") as error:
        prepare("fashion_mnist", root, mirrors=[str(mirror)], log=Log())
    assert "train-images-idx3-ubyte.gz" in str(error.value) and "\n" not in str(error.value)
    assert_nothing_left(tmp_path, root)


def test_fashion_mnist_truncated_gzip_leaves_nothing(tmp_path):
    truncated = gzip.compress(bytes(range(256)) * 64)[:100]
    mirror = write_fake_mirror(tmp_path / "cut", {name: truncated for name in FASHION_FILES})
    root = tmp_path / "root"
    log = Log()
    with pytest.raises(DatasetError, match="truncated gzip"):
        prepare("fashion_mnist", root, mirrors=[str(mirror), str(tmp_path / "gone")], log=log)
    assert len(log) == 2  # one line per failed mirror
    assert_nothing_left(tmp_path, root)


def test_good_files_are_all_or_nothing(tmp_path):
    """Files that verified are not moved into root when a later file fails."""
    payload = b"tiny"
    spec = DownloadSpec(
        files=(FileSpec("a.gz", hashlib.md5(payload).hexdigest()), FileSpec("b.gz", "0" * 32))
    )
    mirror = write_fake_mirror(tmp_path / "m", {"a.gz": gzip.compress(payload)})
    root = tmp_path / "root"
    with pytest.raises(DatasetError, match="b.gz"):
        prepare("fashion_mnist", root, mirrors=[str(mirror)], spec=spec, log=Log())
    assert_nothing_left(tmp_path, root)


@pytest.fixture
def http_mirror(tmp_path) -> Iterator[tuple[str, Path]]:
    """A local HTTP server over a folder: (base URL, folder)."""
    folder = tmp_path / "served"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/", folder
    finally:
        server.shutdown()
        server.server_close()


def test_http_mirror_with_404_fallback(tmp_path, http_mirror):
    base, folder = http_mirror
    payloads = {"a.gz": b"first file", "b.gz": b"second file"}
    (folder / "good").mkdir()
    for name, payload in payloads.items():
        (folder / "good" / name).write_bytes(gzip.compress(payload))
    spec = DownloadSpec(
        files=tuple(FileSpec(name, hashlib.md5(p).hexdigest()) for name, p in payloads.items())
    )
    root = tmp_path / "root"
    log = Log()
    prepare("fashion_mnist", root, mirrors=[base + "absent/", base + "good"], spec=spec, log=log)
    raw = root / "FashionMNIST" / "raw"
    assert (raw / "a").read_bytes() == b"first file" and (raw / "b").read_bytes() == b"second file"
    assert sum("absent/ failed: HTTP Error 404" in line for line in log) == 2


# -------------------------------------------------------------------------------------- cifar10


class Py2Pickler(pickle._Pickler):
    """Pickles ``str`` and ``bytes`` as Python 2 strings, as in the real CIFAR-10 batches.

    Loaded with ``encoding="bytes"`` the keys read as ``b"data"``; with ``encoding="latin1"`` (what
    torchvision uses) as ``"data"``: the same as the upstream files, written by Python 2.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_string(self, value: str | bytes) -> None:
        raw = value.encode("latin1") if isinstance(value, str) else value
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(value)

    dispatch[str] = save_py2_string
    dispatch[bytes] = save_py2_string


def py2_pickle(obj: object) -> bytes:
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def cifar_batch(count: int, seed: int) -> bytes:
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (count, 3072), dtype=torch.uint8, generator=generator)
    labels = [int(x) for x in torch.randint(0, 10, (count,), generator=generator)]
    return py2_pickle({"data": pixels.numpy(), "labels": labels, "batch_label": "fake"})


def build_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def tiny_cifar_members() -> dict[str, bytes]:
    members = {f"cifar-10-batches-py/data_batch_{i}": cifar_batch(4, i) for i in range(1, 6)}
    members["cifar-10-batches-py/test_batch"] = cifar_batch(3, 99)
    names = ["airplane", "automobile", "bird", "cat", "deer"]
    names += ["dog", "frog", "horse", "ship", "truck"]
    members["cifar-10-batches-py/batches.meta"] = py2_pickle({"label_names": names})
    return members


def cifar_spec(archive: Path) -> DownloadSpec:
    return DownloadSpec(files=(FileSpec(archive.name, calculate_md5(archive)),))


def test_cifar10_prepares_from_test_archive(tmp_path):
    mirror = tmp_path / "cifar mirror"
    mirror.mkdir()
    archive = build_tar(mirror / "cifar-10-python.tar.gz", tiny_cifar_members())
    root = tmp_path / "root"
    prepare("cifar10", root, mirrors=[str(mirror)], spec=cifar_spec(archive), log=Log())

    train = open_split("cifar10", root, "train")
    test = open_split("cifar10", root, "test", image_size=16)
    assert (len(train.dataset), len(test.dataset)) == (20, 3)
    image, label = train.dataset[0]
    assert image.shape == (3, 32, 32) and 0 <= label < 10
    assert test.dataset[2][0].shape == (3, 16, 16)
    assert (train.num_classes, train.channels, test.image_size) == (10, 3, 16)

    log = Log()
    prepare("cifar10", root, mirrors=["/nowhere"], spec=cifar_spec(archive), log=log)
    assert any("cached" in line for line in log)


def test_cifar10_wrong_md5(tmp_path):
    build_tar(tmp_path / "cifar-10-python.tar.gz", tiny_cifar_members())
    root = tmp_path / "root"
    with pytest.raises(DatasetError, match="cifar-10-python.tar.gz.*md5 mismatch"):
        prepare("cifar10", root, mirrors=[str(tmp_path)], log=Log())  # the real md5
    assert_nothing_left(tmp_path, root)


def test_cifar10_truncated_archive_is_an_error_and_leaves_nothing(tmp_path):
    whole = build_tar(tmp_path / "whole.tar.gz", tiny_cifar_members()).read_bytes()
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    archive = mirror / "cifar-10-python.tar.gz"
    archive.write_bytes(whole[: len(whole) // 2])  # a download cut off half way
    root = tmp_path / "root"
    # even with a checksum that matches the cut file, extraction must fail cleanly
    with pytest.raises(DatasetError, match="cifar-10-python.tar.gz") as info:
        prepare("cifar10", root, mirrors=[str(mirror)], spec=cifar_spec(archive), log=Log())
    assert "\n" not in str(info.value)
    assert not root.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror", "whole.tar.gz"]


def test_cifar10_rejects_member_escaping_the_folder(tmp_path):
    members = tiny_cifar_members()
    members["../evil"] = b"escaped"
    archive = build_tar(tmp_path / "cifar-10-python.tar.gz", members)
    root = tmp_path / "root"
    with pytest.raises(DatasetError, match="cannot extract"):
        prepare("cifar10", root, mirrors=[str(tmp_path)], spec=cifar_spec(archive), log=Log())
    assert [p for p in tmp_path.rglob("evil")] == []
    assert_nothing_left(tmp_path, root)


# ---------------------------------------------------------------------------------- imagefolder


def png_bytes(size: tuple[int, int], seed: int) -> bytes:
    rng = random.Random(seed)
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    image.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(size[0] * size[1])])
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def image_tree(tmp_path) -> Path:
    """Two classes of 3 good PNGs each, plus a random-bytes .png and a truncated PNG."""
    tree = tmp_path / "my images"
    for class_number, name in enumerate(["cats", "dogs"]):
        folder = tree / name
        folder.mkdir(parents=True)
        for i in range(3):
            (folder / f"img {i}.png").write_bytes(png_bytes((12, 10), 10 * class_number + i))
    (tree / "cats" / "corrupt.png").write_bytes(random.Random(1).randbytes(300))
    whole = png_bytes((40, 40), 7)
    (tree / "dogs" / "truncated.png").write_bytes(whole[: len(whole) // 2])
    return tree


def test_imagefolder_skips_unreadable_and_loads(tmp_path, image_tree):
    root = tmp_path / "index root"
    log = Log()
    prepare("imagefolder", root, path=image_tree, log=log)
    index = read_json(root / "index.json")
    assert index["classes"] == ["cats", "dogs"]
    listed = sorted(Path(file).name for file, _ in index["samples"])
    assert listed == sorted(["img 0.png", "img 1.png", "img 2.png"] * 2)
    skipped = sorted(Path(entry["path"]).name for entry in index["skipped"])
    assert skipped == ["corrupt.png", "truncated.png"]
    assert sum("skipping" in line for line in log) == 2

    split = open_split("imagefolder", root, "train", image_size=16)
    assert (len(split.dataset), split.skipped, split.num_classes) == (6, 2, 2)
    images = [split.dataset[i] for i in range(len(split.dataset))]
    assert all(image.shape == (3, 16, 16) for image, _ in images)
    assert sorted(label for _, label in images) == [0, 0, 0, 1, 1, 1]
    assert open_split("imagefolder", root, "all").dataset[0][0].shape == (3, 64, 64)

    log = Log()
    prepare("imagefolder", root, path=image_tree, log=log)
    assert any("cached" in line for line in log)


def _class_tree(tree: Path, counts: dict[str, int], seed: int = 0) -> Path:
    for class_number, (name, count) in enumerate(counts.items()):
        (tree / name).mkdir(parents=True)
        for i in range(count):
            (tree / name / f"{i}.png").write_bytes(png_bytes((6, 6), seed + 100 * class_number + i))
    return tree


def _files(split) -> list[str]:
    return [file for file, _ in split.dataset.samples]


def test_imagefolder_holds_out_a_fixed_share_for_validation(tmp_path):
    tree = _class_tree(tmp_path / "images", {"cats": 20, "dogs": 10})
    root = tmp_path / "root"
    prepare("imagefolder", root, path=tree, log=Log())
    train = open_split("imagefolder", root, "train", val_fraction=0.2)
    test = open_split("imagefolder", root, "test", val_fraction=0.2)
    everything = open_split("imagefolder", root, "all", val_fraction=0.2)
    assert not set(_files(train)) & set(_files(test))  # validation never sees training images
    assert sorted(_files(train) + _files(test)) == sorted(_files(everything))
    assert sorted(label for _, label in test.dataset.samples) == [0, 0, 0, 0, 1, 1]
    again = open_split("imagefolder", root, "test", val_fraction=0.2)
    assert _files(again) == _files(test)  # the same images in every run
    with pytest.raises(DatasetError, match="no test images"):
        open_split("imagefolder", root, "test", val_fraction=0.0)


def test_imagefolder_val_folder_is_the_held_out_split(tmp_path):
    tree = _class_tree(tmp_path / "images" / "train", {"cats": 4, "dogs": 4}).parent
    _class_tree(tree / "val", {"cats": 2, "dogs": 1}, seed=50)
    (tree / "val" / "dogs" / "bad.png").write_bytes(b"not a png")
    root = tmp_path / "root"
    log = Log()
    prepare("imagefolder", root, path=tree, log=log)
    assert any("3 of them held out (val/)" in line for line in log)
    test = open_split("imagefolder", root, "test", val_fraction=0.5)
    assert sorted(Path(f).relative_to(tree).as_posix() for f in _files(test)) == [
        "val/cats/0.png", "val/cats/1.png", "val/dogs/0.png",
    ]  # fmt: skip
    assert sorted(label for _, label in test.dataset.samples) == [0, 0, 1]
    train = open_split("imagefolder", root, "train", val_fraction=0.5)
    assert len(train.dataset) == 8 and all("/train/" in f for f in _files(train))
    assert test.skipped == 1


def test_imagefolder_index_lists_the_images_the_config_check_kept(tmp_path, monkeypatch):
    """prepare reads the listing the config check kept (folder_index) while the folder is
    unchanged: its index holds the same images, and no folder is listed again."""
    tree = _class_tree(tmp_path / "images", {"cats": 3, "dogs": 2})
    past = time.time() - 3600  # a folder left as it was: its listing is kept
    for folder in (tree, tree / "cats", tree / "dogs"):
        os.utime(folder, (past, past))
    listings = tmp_path / "listings"
    counts, keep = folder_index.image_folder_counts(tree, listings)  # as the config check
    keep()
    assert counts.train == (3, 2)

    def no_listing(path):
        raise AssertionError(f"listed {path} again")

    monkeypatch.setattr(os, "scandir", no_listing)
    root = tmp_path / "root"
    prepare("imagefolder", root, path=tree, log=Log(), listings=listings)
    index = read_json(root / "index.json")
    monkeypatch.undo()
    expected = datasets.list_image_folder(tree)
    assert [tuple(sample) for sample in index["samples"]] == list(expected.train)


def test_imagefolder_index_of_an_older_format_is_rebuilt(tmp_path):
    tree = _class_tree(tmp_path / "images", {"cats": 2})
    root = tmp_path / "root"
    prepare("imagefolder", root, path=tree, log=Log())
    index = read_json(root / "index.json")
    index["version"] = 1
    (root / "index.json").write_text(json.dumps(index))
    log = Log()
    prepare("imagefolder", root, path=tree, log=log)
    assert not any("cached" in line for line in log)
    assert read_json(root / "index.json")["version"] == fetch.INDEX_VERSION


def test_imagefolder_file_broken_after_prepare_raises(tmp_path, image_tree):
    root = tmp_path / "root"
    prepare("imagefolder", root, path=image_tree, log=Log())
    split = open_split("imagefolder", root, "train", image_size=8)
    broken, _ = split.dataset.samples[0]
    Path(broken).write_bytes(b"no longer a png")
    with pytest.raises(DatasetError, match=f"cannot decode {broken}"):
        split.dataset[0]


# ------------------------------------------------------------------------------------ synthetic


def test_synthetic_is_deterministic_and_sized(tmp_path):
    settings = {"channels": 3, "image_size": 8, "num_classes": 4, "num_samples": 300}
    assert prepare("synthetic", tmp_path / "unused") == tmp_path / "unused"
    assert not (tmp_path / "unused").exists()
    first = open_split("synthetic", None, "train", synthetic=settings)
    second = open_split("synthetic", None, "test", synthetic=settings)
    assert len(first.dataset) == 300
    assert (first.num_classes, first.channels, first.image_size) == (4, 3, 8)
    for index in (0, 17, 299):
        (a, label_a), (b, label_b) = first.dataset[index], second.dataset[index]
        assert a.shape == (3, 8, 8) and torch.equal(a, b) and label_a == label_b
        assert 0 <= label_a < 4
    assert torch.equal(first.dataset[256][0], first.dataset[0][0])  # the pool repeats
    with pytest.raises(IndexError):
        first.dataset[300]
    torch.manual_seed(12345)  # the run seed does not change the data
    again = open_split("synthetic", None, "train", synthetic=settings)
    assert torch.equal(again.dataset[5][0], first.dataset[5][0])


def test_bad_arguments_raise_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="unknown dataset"):
        prepare("mnist", tmp_path)
    with pytest.raises(DatasetError, match="unknown split"):
        open_split("synthetic", None, "val", synthetic={})
    with pytest.raises(DatasetError, match="lacks"):
        open_split("synthetic", None, "train", synthetic={"channels": 3})
    with pytest.raises(DatasetError, match="run prepare first"):
        open_split("imagefolder", tmp_path, "train")
    with pytest.raises(DatasetError, match="no prepared copy"):
        open_split("fashion_mnist", tmp_path, "train")
