"""Datasets: a verified local copy (``prepare``) and a ready-to-load split (``open_split``).

``prepare(name, root, ...)`` makes ``root`` hold a complete, checked copy of one dataset and is safe
to call again: a copy that is already there is kept (logged as "cached"). Everything is fetched
and unpacked in a temporary folder beside ``root`` and moved into place only once verified, so a
failed or killed prepare leaves nothing that looks finished.

``open_split(name, root, split, ...)`` returns a :class:`Split`: a ``torch`` dataset whose items
are ``(float tensor C x H x W, int label)`` plus the facts a model needs (classes, channels, size).

Datasets (``DATASET_NAMES``):

- ``fashion_mnist``: four gzip files fetched from mirrors, checked by the md5 of their
  *decompressed* content (so re-compressed copies, e.g. Debian's ``dataset-fashion-mnist``, are
  accepted) and stored where ``torchvision.datasets.FashionMNIST`` finds them.
- ``cifar10``: one archive, checked by its md5, extracted with tarfile's ``"data"`` filter.
- ``imagefolder``: a local folder of class subfolders (torchvision's ImageFolder layout); prepare
  decodes every image once and writes ``<root>/index.json`` listing the readable ones.
- ``synthetic``: fixed random tensors, generated in memory; nothing to prepare.

A mirror is a base location; a file's location is the base plus its name. A base is an http(s)
URL, a ``file://`` URL or a local folder path (spaces allowed). Mirrors are tried in order, per
file; a mirror that fails (missing file, broken gzip, md5 mismatch) is logged and the next one is
tried. Given no mirrors, ``prepare`` uses the upstream ones in :data:`SPECS`.

This module knows nothing of Snakemake or config files: callers pass plain arguments.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.datasets import CIFAR10, FashionMNIST
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset, pil_loader
from torchvision.datasets.utils import calculate_md5, download_url

from batchscope.core.results import write_json

DATASET_NAMES = ("fashion_mnist", "cifar10", "imagefolder", "synthetic")
SPLITS = ("train", "test")

#: Side of the images ``imagefolder`` yields when ``open_split`` gets no ``image_size``.
IMAGEFOLDER_DEFAULT_SIZE = 64

#: Images ``synthetic`` keeps in memory; items beyond it repeat the pool (index modulo its size).
SYNTHETIC_POOL = 256
SYNTHETIC_SEED = 0
SYNTHETIC_KEYS = ("channels", "image_size", "num_classes", "num_samples")

FASHION_MEAN, FASHION_STD = (0.2860,), (0.3530,)
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)

INDEX_NAME = "index.json"
INDEX_FORMAT = "batchscope-imagefolder-index"
INDEX_VERSION = 1

#: Written into the extracted CIFAR-10 folder once verified; holds the archive's md5.
CIFAR_STAMP = ".batchscope-verified"

#: Exceptions a broken image file raises while PIL decodes it.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


class DatasetError(RuntimeError):
    """A dataset cannot be fetched, verified or read; the message is one line naming the culprit."""


class _MirrorFailed(Exception):
    """One mirror could not supply one file; the message is the reason, in a few words."""


@dataclass(frozen=True)
class FileSpec:
    """A file to fetch: its name at the mirror and the md5 it must have.

    For ``fashion_mnist`` the md5 is that of the decompressed content (the ``.gz`` bytes differ
    between mirrors that re-compress); for ``cifar10`` it is that of the archive itself.
    """

    filename: str
    md5: str


@dataclass(frozen=True)
class DownloadSpec:
    """What ``prepare`` fetches for a downloadable dataset, and from where by default.

    Tests and private mirrors with different bytes override it: pass
    ``prepare(..., spec=DownloadSpec(files=(FileSpec(name, md5),)))``.
    """

    files: tuple[FileSpec, ...]
    mirrors: tuple[str, ...] = ()


SPECS: dict[str, DownloadSpec] = {
    "fashion_mnist": DownloadSpec(
        files=(
            FileSpec("train-images-idx3-ubyte.gz", "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
            FileSpec("train-labels-idx1-ubyte.gz", "9018921c3c673c538a1fc5bad174d6f9"),
            FileSpec("t10k-images-idx3-ubyte.gz", "8181f5470baa50b63fa0f6fddb340f0a"),
            FileSpec("t10k-labels-idx1-ubyte.gz", "15d484375f8d13e6eb1aabb0c3f46965"),
        ),
        mirrors=tuple(FashionMNIST.mirrors),
    ),
    "cifar10": DownloadSpec(
        files=(FileSpec("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),),
        mirrors=("https://www.cs.toronto.edu/~kriz/",),
    ),
}


@dataclass(frozen=True)
class Split:
    """One split of a dataset, ready for a ``DataLoader``."""

    dataset: Dataset  # items are (float tensor C x H x W, int label)
    num_classes: int
    channels: int  # channels of the tensors it yields
    image_size: int  # H (== W) of the tensors it yields
    skipped: int  # images skipped as unreadable (imagefolder), else 0


# --------------------------------------------------------------------------------------- prepare


def prepare(
    name: str,
    root: str | Path,
    *,
    mirrors: Sequence[str] = (),
    path: str | Path | None = None,
    log: Callable[[str], None] = print,
    spec: DownloadSpec | None = None,
) -> Path:
    """Make ``root`` hold a ready, verified copy of dataset ``name``; return ``root``.

    ``mirrors`` (fashion_mnist, cifar10) replace the upstream mirrors of ``SPECS[name]`` when
    given (a single string or path counts as one mirror). ``path`` (imagefolder only) is the
    folder of class subfolders. ``spec`` (fashion_mnist, cifar10) replaces ``SPECS[name]``, e.g.
    to accept a test archive. Idempotent: a verified copy already in ``root`` is kept.
    """
    _check_name(name)
    root_path = Path(root).absolute()
    if spec is not None and name not in SPECS:
        raise DatasetError(f"{name}: has nothing to download, so it takes no spec")
    if isinstance(mirrors, str | os.PathLike):  # one mirror given bare, not as a list
        mirrors = [mirrors]
    mirror_list = tuple(os.fspath(m) for m in mirrors)
    if name == "fashion_mnist":
        spec = spec or SPECS[name]
        _prepare_fashion_mnist(root_path, spec, mirror_list or spec.mirrors, log)
    elif name == "cifar10":
        spec = spec or SPECS[name]
        _prepare_cifar10(root_path, spec, mirror_list or spec.mirrors, log)
    elif name == "imagefolder":
        _prepare_imagefolder(root_path, path, log)
    return Path(root)


def _check_name(name: str) -> None:
    if name not in DATASET_NAMES:
        raise DatasetError(f"unknown dataset {name!r}; expected one of {', '.join(DATASET_NAMES)}")


def _prepare_fashion_mnist(
    root: Path, spec: DownloadSpec, mirrors: Sequence[str], log: Callable[[str], None]
) -> None:
    """Fetch, decompress and verify the files torchvision's FashionMNIST reads, into ``root``."""
    raw = _fashion_raw_folder(root)
    missing = [f for f in spec.files if not _has_md5(raw / _without_gz(f.filename), f.md5)]
    if not missing:
        log(f"fashion_mnist: cached in {raw}")
        return
    with _staging(root) as staging:
        staged = [
            _fetch_verified("fashion_mnist", f, mirrors, staging, log, unpack=_gunzip)
            for f in missing
        ]
        raw.mkdir(parents=True, exist_ok=True)
        for file in staged:
            os.replace(file, raw / file.name)
    log(f"fashion_mnist: ready in {raw}")


def _prepare_cifar10(
    root: Path, spec: DownloadSpec, mirrors: Sequence[str], log: Callable[[str], None]
) -> None:
    """Fetch and verify the CIFAR-10 archive, extract it safely, move its folder into ``root``."""
    if len(spec.files) != 1:
        raise DatasetError(f"cifar10: spec must name exactly one archive, got {len(spec.files)}")
    archive = spec.files[0]
    target = root / CIFAR10.base_folder
    if _cifar_ready(target, archive.md5):
        log(f"cifar10: cached in {target}")
        return
    with _staging(root) as staging:
        fetched = _fetch_verified("cifar10", archive, mirrors, staging, log)
        extracted = staging / "extracted"
        _extract_tar(fetched, extracted, label="cifar10")
        folder = extracted / CIFAR10.base_folder
        absent = [
            f"{CIFAR10.base_folder}/{name}"
            for name in _cifar_file_names()
            if not (folder / name).is_file()
        ]
        if absent:
            raise DatasetError(f"cifar10: {archive.filename} lacks {', '.join(absent)}")
        (folder / CIFAR_STAMP).write_text(archive.md5 + "\n", encoding="utf-8")
        root.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            os.replace(target, staging / "stale")  # an unverified leftover; removed with staging
        os.replace(folder, target)
    log(f"cifar10: ready in {target}")


def _prepare_imagefolder(root: Path, path: str | Path | None, log: Callable[[str], None]) -> None:
    """Decode every image under ``path`` once; write ``<root>/index.json`` of the readable ones.

    The index is rebuilt only when the folder's listing (names, sizes, mtimes) has changed.
    """
    if path is None:
        raise DatasetError("imagefolder: prepare needs path=, a folder of class subfolders")
    source = Path(path).absolute()
    if not source.is_dir():
        raise DatasetError(f"imagefolder: {source} is not a directory")
    try:
        classes, class_to_idx = find_classes(source)
        candidates = make_dataset(source, class_to_idx, extensions=IMG_EXTENSIONS, allow_empty=True)
    except OSError as exc:
        raise DatasetError(f"imagefolder: cannot list {source}: {_one_line(exc)}") from exc
    fingerprint = _listing_fingerprint(candidates)
    index_path = root / INDEX_NAME
    old = _read_index_or_none(index_path)
    if old and old.get("source") == str(source) and old.get("fingerprint") == fingerprint:
        log(f"imagefolder: cached index {index_path}")
        return
    samples, skipped = [], []
    for file, label in candidates:
        reason = _decode_error(file)
        if reason is None:
            samples.append([file, label])
        else:
            skipped.append({"path": file, "reason": reason})
            log(f"imagefolder: skipping unreadable {file}: {reason}")
    if not samples:
        raise DatasetError(f"imagefolder: no readable image under {source}")
    index = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "source": str(source),
        "fingerprint": fingerprint,
        "classes": classes,
        "samples": samples,
        "skipped": skipped,
    }
    write_json(index_path, index)
    log(f"imagefolder: indexed {len(samples)} images, skipped {len(skipped)}, in {index_path}")


# ------------------------------------------------------------------------------ fetch and verify


@contextmanager
def _staging(root: Path) -> Iterator[Path]:
    """A temporary folder beside ``root`` (same filesystem, so ``os.replace`` is atomic)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.partial-"))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fetch_verified(
    dataset: str,
    file: FileSpec,
    mirrors: Sequence[str],
    staging: Path,
    log: Callable[[str], None],
    unpack: Callable[[Path], Path] | None = None,
) -> Path:
    """Try ``mirrors`` in order for ``file``; return the first copy whose md5 matches.

    ``unpack`` turns the fetched file into the content the md5 is of (e.g. gunzip).
    """
    if not mirrors:
        raise DatasetError(f"{dataset}: no mirror to fetch {file.filename} from")
    reasons = []
    for number, mirror in enumerate(mirrors):
        attempt = staging / f"{file.filename}.mirror-{number}"
        attempt.mkdir()
        try:
            fetched = _fetch(mirror, file.filename, attempt)
            content = unpack(fetched) if unpack else fetched
            _verify_md5(content, file.md5)
            return content
        except _MirrorFailed as exc:
            reasons.append(f"{mirror} -> {exc}")
            log(f"{dataset}: {file.filename} from {mirror} failed: {exc}")
    raise DatasetError(f"{dataset}: no mirror gave a good {file.filename}: {'; '.join(reasons)}")


def _fetch(mirror: str, filename: str, folder: Path) -> Path:
    """Copy or download ``mirror`` + ``filename`` into ``folder``; return the local file."""
    scheme = urlparse(mirror).scheme
    dest = folder / filename
    try:
        if scheme in ("http", "https"):
            url = mirror if mirror.endswith("/") else mirror + "/"
            download_url(url + filename, str(folder), filename=filename)
        elif scheme == "file":
            shutil.copyfile(Path(url2pathname(urlparse(mirror).path)) / filename, dest)
        elif len(scheme) > 1:  # a one-letter scheme is a Windows drive, i.e. a path
            raise _MirrorFailed(f"unsupported mirror scheme {scheme!r}")
        else:
            shutil.copyfile(Path(mirror).expanduser() / filename, dest)
    except FileNotFoundError as exc:
        raise _MirrorFailed(f"missing {exc.filename or filename}") from exc
    except (OSError, RuntimeError, ValueError, http.client.HTTPException) as exc:
        raise _MirrorFailed(_one_line(exc)) from exc
    if not dest.is_file():
        raise _MirrorFailed(f"nothing downloaded for {filename}")
    return dest


def _gunzip(file: Path) -> Path:
    """Decompress ``x.gz`` to ``x`` beside it; a broken gzip is the mirror's failure."""
    out = file.with_name(_without_gz(file.name))
    try:
        with gzip.open(file, "rb") as source, open(out, "wb") as dest:
            shutil.copyfileobj(source, dest, length=1 << 20)
    except EOFError as exc:
        raise _MirrorFailed(f"truncated gzip ({_one_line(exc)})") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise _MirrorFailed(f"corrupt gzip ({_one_line(exc)})") from exc
    return out


def _verify_md5(file: Path, expected: str) -> None:
    actual = calculate_md5(file)
    if actual != expected:
        raise _MirrorFailed(f"md5 mismatch: expected {expected}, got {actual}")


def _has_md5(file: Path, expected: str) -> bool:
    return file.is_file() and calculate_md5(file) == expected


def _extract_tar(archive: Path, dest: Path, *, label: str) -> None:
    """Extract ``archive`` into ``dest``, refusing members that would land outside it."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DatasetError(f"{label}: cannot extract {archive.name}: {_one_line(exc)}") from exc


def _cifar_file_names() -> list[str]:
    batches = CIFAR10.train_list + CIFAR10.test_list
    return [name for name, _ in batches] + [CIFAR10.meta["filename"]]


def _cifar_ready(folder: Path, md5: str) -> bool:
    """Whether ``folder`` is a CIFAR-10 folder ``prepare`` extracted from the archive ``md5``."""
    stamp = folder / CIFAR_STAMP
    return (
        stamp.is_file()
        and stamp.read_text(encoding="utf-8").strip() == md5
        and all((folder / name).is_file() for name in _cifar_file_names())
    )


def _fashion_raw_folder(root: Path) -> Path:
    """Where ``torchvision.datasets.FashionMNIST(root)`` looks for the decompressed files."""
    return root / FashionMNIST.__name__ / "raw"


def _without_gz(filename: str) -> str:
    return filename.removesuffix(".gz")


def _decode_error(file: str | Path) -> str | None:
    """Why PIL cannot fully decode ``file``, or None if it can."""
    try:
        with Image.open(file) as image:
            image.load()
    except _DECODE_ERRORS as exc:
        return _one_line(exc) or type(exc).__name__
    return None


def _listing_fingerprint(samples: Sequence[tuple[str, int]]) -> str:
    """A digest of the files' names, labels, sizes and mtimes: changes when the folder does."""
    digest = hashlib.sha256()
    for file, label in samples:
        stat = os.stat(file)
        digest.update(f"{file}\t{label}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _read_index(index_path: Path) -> dict[str, Any]:
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"imagefolder: cannot read {index_path}: {_one_line(exc)}") from exc
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise DatasetError(f"imagefolder: {index_path} is not a batchscope image index")
    return index


def _read_index_or_none(index_path: Path) -> dict[str, Any] | None:
    """The index at ``index_path``, or None if there is none or it is unreadable."""
    try:
        return _read_index(index_path) if index_path.is_file() else None
    except DatasetError:
        return None


def _one_line(exc: BaseException) -> str:
    """An exception's message with all whitespace runs (newlines included) made single spaces."""
    return " ".join(str(exc).split())


# ------------------------------------------------------------------------------------ open_split


def open_split(
    name: str,
    root: str | Path | None,
    split: str,
    *,
    channels: int | None = None,
    image_size: int | None = None,
    synthetic: Mapping | None = None,
) -> Split:
    """Open split ``"train"`` or ``"test"`` of a prepared dataset.

    ``channels=3`` expands a 1-channel dataset to 3 (torchvision models need 3); other changes
    of channel count are refused. ``image_size`` resizes to a square of that side. ``imagefolder``
    has one index, so ``"train"`` and ``"test"`` are the same images. ``synthetic`` needs the
    mapping ``synthetic`` with keys ``channels``, ``image_size``, ``num_classes``, ``num_samples``;
    ``channels`` and ``image_size`` given here override it, and ``root`` may be None.
    """
    _check_name(name)
    if split not in SPLITS:
        raise DatasetError(f"{name}: unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if name == "synthetic":
        return _open_synthetic(synthetic, channels, image_size)
    if root is None:
        raise DatasetError(f"{name}: open_split needs the root prepare() filled")
    root_path = Path(root)
    if name == "fashion_mnist":
        return _open_fashion_mnist(root_path, split, channels, image_size)
    if name == "cifar10":
        return _open_cifar10(root_path, split, channels, image_size)
    return _open_imagefolder(root_path, channels, image_size)


def native_channels(name: str, synthetic: Mapping | None = None) -> int:
    """Channels a dataset's images have before any expansion (imagefolder is read as RGB)."""
    _check_name(name)
    if name == "synthetic":
        if not synthetic or "channels" not in synthetic:
            raise DatasetError("synthetic: the mapping `synthetic` needs the key channels")
        return int(synthetic["channels"])
    return 1 if name == "fashion_mnist" else 3


class ExpandChannels:
    """Repeat a 1-channel image tensor to ``channels`` channels (a class: workers can pickle it)."""

    def __init__(self, channels: int) -> None:
        self.channels = channels

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.repeat(self.channels, 1, 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(channels={self.channels})"


def _image_transform(
    name: str,
    native_channels: int,
    channels: int | None,
    image_size: int | None,
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None,
) -> transforms.Compose:
    """PIL image -> (resize) -> tensor -> (normalize) -> (1 -> 3 channels)."""
    steps: list[Callable] = []
    if image_size is not None:
        steps.append(transforms.Resize((image_size, image_size)))
    steps.append(transforms.ToTensor())
    if normalize is not None:
        steps.append(transforms.Normalize(*normalize))
    if channels is not None and channels != native_channels:
        if (native_channels, channels) != (1, 3):
            raise DatasetError(
                f"{name}: cannot turn {native_channels}-channel images into {channels} channels"
            )
        steps.append(ExpandChannels(channels))
    return transforms.Compose(steps)


def _open_fashion_mnist(
    root: Path, split: str, channels: int | None, image_size: int | None
) -> Split:
    transform = _image_transform(
        "fashion_mnist", 1, channels, image_size, (FASHION_MEAN, FASHION_STD)
    )
    try:
        dataset = FashionMNIST(root, train=split == "train", transform=transform, download=False)
    except RuntimeError as exc:
        raise DatasetError(
            f"fashion_mnist: no prepared copy in {_fashion_raw_folder(root)}: {_one_line(exc)}"
        ) from exc
    return Split(dataset, len(FashionMNIST.classes), channels or 1, image_size or 28, skipped=0)


class PreparedCIFAR10(CIFAR10):
    """torchvision's CIFAR10 checking only that each batch exists, not its md5.

    ``prepare`` verified the whole archive's md5 before extracting it, so the per-batch md5s
    (which a test archive of the same format cannot match) add nothing.
    """

    train_list = [[name, None] for name, _ in CIFAR10.train_list]
    test_list = [[name, None] for name, _ in CIFAR10.test_list]
    meta = {**CIFAR10.meta, "md5": None}


def _open_cifar10(root: Path, split: str, channels: int | None, image_size: int | None) -> Split:
    transform = _image_transform("cifar10", 3, channels, image_size, (CIFAR_MEAN, CIFAR_STD))
    try:
        dataset = PreparedCIFAR10(root, train=split == "train", transform=transform)
    except (RuntimeError, OSError, ValueError) as exc:
        raise DatasetError(
            f"cifar10: no prepared copy in {root / CIFAR10.base_folder}: {_one_line(exc)}"
        ) from exc
    return Split(dataset, len(dataset.classes), channels or 3, image_size or 32, skipped=0)


class IndexedImages(Dataset):
    """Images listed in an imagefolder index, decoded on access; a file that fails raises."""

    def __init__(self, samples: Sequence[tuple[str, int]], transform: Callable) -> None:
        self.samples = [(str(file), int(label)) for file, label in samples]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        file, label = self.samples[index]
        try:
            image = pil_loader(file)
        except _DECODE_ERRORS as exc:
            raise DatasetError(f"imagefolder: cannot decode {file}: {_one_line(exc)}") from exc
        return self.transform(image), label


def _open_imagefolder(root: Path, channels: int | None, image_size: int | None) -> Split:
    index_path = root / INDEX_NAME
    if not index_path.is_file():
        raise DatasetError(f"imagefolder: no index at {index_path}; run prepare first")
    index = _read_index(index_path)
    size = image_size or IMAGEFOLDER_DEFAULT_SIZE
    transform = _image_transform("imagefolder", 3, channels, size, normalize=None)
    dataset = IndexedImages(index["samples"], transform)
    return Split(dataset, len(index["classes"]), 3, size, skipped=len(index["skipped"]))


class SyntheticImages(Dataset):
    """Fixed random images and labels, the same every run (own generator, seed 0).

    A pool of ``min(num_samples, SYNTHETIC_POOL)`` items is generated once; item ``i`` is pool
    item ``i % pool``, so an item costs an index, not a generation. Items are views into the
    pool: do not modify them in place.
    """

    def __init__(self, num_samples: int, channels: int, image_size: int, num_classes: int) -> None:
        generator = torch.Generator().manual_seed(SYNTHETIC_SEED)
        pool = min(num_samples, SYNTHETIC_POOL)
        shape = (pool, channels, image_size, image_size)
        self.num_samples = num_samples
        self.images = torch.randn(shape, generator=generator)
        self.labels = torch.randint(num_classes, (pool,), generator=generator).tolist()

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not -self.num_samples <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        slot = index % len(self.labels)
        return self.images[slot], self.labels[slot]


def _open_synthetic(
    synthetic: Mapping | None, channels: int | None, image_size: int | None
) -> Split:
    if synthetic is None:
        raise DatasetError(f"synthetic: open_split needs synthetic={{{', '.join(SYNTHETIC_KEYS)}}}")
    missing = [key for key in SYNTHETIC_KEYS if key not in synthetic]
    if missing:
        raise DatasetError(f"synthetic: mapping lacks {', '.join(missing)}")
    settings = {key: synthetic[key] for key in SYNTHETIC_KEYS}
    if channels is not None:
        settings["channels"] = channels
    if image_size is not None:
        settings["image_size"] = image_size
    bad = [k for k, v in settings.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
    if bad:
        raise DatasetError(f"synthetic: {', '.join(bad)} must be positive integers")
    dataset = SyntheticImages(
        settings["num_samples"],
        settings["channels"],
        settings["image_size"],
        settings["num_classes"],
    )
    return Split(
        dataset, settings["num_classes"], settings["channels"], settings["image_size"], skipped=0
    )
