"""Datasets, prepared: ``prepare`` makes a folder hold a verified local copy of one dataset.

``prepare(name, root, ...)`` makes ``root`` hold a complete, checked copy of one dataset and is safe
to call again: a copy that is already there is kept (logged as "cached"). Everything is fetched
and unpacked in a temporary folder beside ``root`` and moved into place only once verified, so a
failed or killed prepare leaves nothing that looks finished. ``batchscope.bench.data.open_split``
then opens a split of it; ``python -m batchscope.bench.download`` is the command line.

Datasets (``batchscope.core.datasets.NAMES``):

- ``fashion_mnist``: four gzip files fetched from mirrors, checked by the md5 of their
  *decompressed* content (so re-compressed copies, e.g. Debian's ``dataset-fashion-mnist``, are
  accepted) and stored where ``torchvision.datasets.FashionMNIST`` finds them.
- ``cifar10``: one archive, checked by its md5, extracted with tarfile's ``"data"`` filter.
- ``imagefolder``: a local folder of class subfolders (torchvision's ImageFolder layout), with
  its held-out images in a ``val/`` subfolder if it has one; prepare decodes every image once
  and writes ``<root>/index.json`` listing the readable ones.
- ``synthetic``: fixed random tensors, generated in memory; nothing to prepare.

A mirror is a base location; a file's location is the base plus its name. A base is an http(s)
URL, a ``file://`` URL or a local folder path (spaces allowed). Mirrors are tried in order, per
file; a mirror that fails (missing file, broken gzip, md5 mismatch) is logged and the next one is
tried. Given no mirrors, ``prepare`` uses the upstream ones in :data:`SPECS`.

This module imports torchvision (its dataset classes say where their files go); the benchmark
process never imports it. It knows nothing of Snakemake or config files: callers pass plain
arguments.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from PIL import Image
from torchvision.datasets import CIFAR10, FashionMNIST
from torchvision.datasets.utils import calculate_md5, download_url

from batchscope.bench.data import (
    INDEX_FORMAT,
    INDEX_NAME,
    INDEX_VERSION,
    DatasetError,
    check_name,
    one_line,
    read_index,
)
from batchscope.bench.images import DECODE_ERRORS, fashion_raw_folder
from batchscope.core import datasets, folder_index
from batchscope.core.results import write_json, write_text

#: Written into the extracted CIFAR-10 folder once verified; holds the archive's md5.
CIFAR_STAMP = ".batchscope-verified"


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


# --------------------------------------------------------------------------------------- prepare


def prepare(
    name: str,
    root: str | Path,
    *,
    mirrors: Sequence[str] = (),
    path: str | Path | None = None,
    log: Callable[[str], None] = print,
    spec: DownloadSpec | None = None,
    listings: str | Path | None = None,
) -> Path:
    """Make ``root`` hold a ready, verified copy of dataset ``name``; return ``root``.

    ``mirrors`` (fashion_mnist, cifar10) replace the upstream mirrors of ``SPECS[name]`` when
    given (a single string or path counts as one mirror). ``path`` (imagefolder only) is the
    folder of class subfolders. ``spec`` (fashion_mnist, cifar10) replaces ``SPECS[name]``, e.g.
    to accept a test archive. ``listings`` (imagefolder only): where the folder's listing is
    kept (:mod:`batchscope.core.folder_index`), read rather than listed while the folder is
    unchanged. Idempotent: a verified copy already in ``root`` is kept.
    """
    check_name(name)
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
        _prepare_imagefolder(root_path, path, log, listings)
    return Path(root)


def _prepare_fashion_mnist(
    root: Path, spec: DownloadSpec, mirrors: Sequence[str], log: Callable[[str], None]
) -> None:
    """Fetch, decompress and verify the files torchvision's FashionMNIST reads, into ``root``."""
    raw = fashion_raw_folder(root)
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
        write_text(folder / CIFAR_STAMP, archive.md5 + "\n")
        root.mkdir(parents=True, exist_ok=True)
        if target.exists() or target.is_symlink():
            os.replace(target, staging / "stale")  # an unverified leftover; removed with staging
        os.replace(folder, target)
    log(f"cifar10: ready in {target}")


def _prepare_imagefolder(
    root: Path, path: str | Path | None, log: Callable[[str], None], listings: str | Path | None
) -> None:
    """Decode every image under ``path`` once; write ``<root>/index.json`` of the readable ones.

    The images are those :func:`batchscope.core.datasets.list_image_folder` lists, read from
    the listing the config check kept under ``listings`` while the folder is unchanged (the
    check counts the same); a ``val/`` folder's are indexed apart, as ``val_samples``. The
    index is rebuilt only when the folder's listing (names, sizes, mtimes) has changed.
    """
    if path is None:
        raise DatasetError("imagefolder: prepare needs path=, a folder of class subfolders")
    source = Path(path).absolute()
    if not source.is_dir():
        raise DatasetError(f"imagefolder: {source} is not a directory")
    try:
        listing = folder_index.image_folder_listing(source, listings)
    except datasets.ImageFolderError as exc:
        raise DatasetError(f"imagefolder: {exc}") from exc
    parts = {"samples": listing.train, "val_samples": listing.val or ()}
    tagged = [*parts["samples"], *[("val", *sample) for sample in parts["val_samples"]]]
    fingerprint = _listing_fingerprint(tagged)
    index_path = root / INDEX_NAME
    old = _read_index_or_none(index_path)
    if (
        old
        and old.get("version") == INDEX_VERSION
        and old.get("source") == str(source)
        and old.get("fingerprint") == fingerprint
    ):
        log(f"imagefolder: cached index {index_path}")
        return
    readable: dict[str, list] = {"samples": [], "val_samples": []}
    skipped = []
    for part, candidates in parts.items():
        for file, label in candidates:
            reason = _decode_error(file)
            if reason is None:
                readable[part].append([file, label])
            else:
                skipped.append({"path": file, "reason": reason})
                log(f"imagefolder: skipping unreadable {file}: {reason}")
    if not readable["samples"]:
        raise DatasetError(f"imagefolder: no readable image under {source}")
    if listing.val is not None and not readable["val_samples"]:
        raise DatasetError(f"imagefolder: no readable image under {source / datasets.VAL_FOLDER}")
    index = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "source": str(source),
        "fingerprint": fingerprint,
        "classes": list(listing.classes),
        "samples": readable["samples"],
        "skipped": skipped,
    }
    if listing.val is not None:
        index["val_samples"] = readable["val_samples"]
    write_json(index_path, index)
    held_out = f", {len(readable['val_samples'])} of them held out (val/)" if listing.val else ""
    total = len(readable["samples"]) + len(readable["val_samples"])
    log(f"imagefolder: indexed {total} images{held_out}, skipped {len(skipped)}, in {index_path}")


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
        raise _MirrorFailed(one_line(exc)) from exc
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
        raise _MirrorFailed(f"truncated gzip ({one_line(exc)})") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise _MirrorFailed(f"corrupt gzip ({one_line(exc)})") from exc
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
        raise DatasetError(f"{label}: cannot extract {archive.name}: {one_line(exc)}") from exc


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


def _without_gz(filename: str) -> str:
    return filename.removesuffix(".gz")


def _decode_error(file: str | Path) -> str | None:
    """Why PIL cannot fully decode ``file``, or None if it can."""
    try:
        with Image.open(file) as image:
            image.load()
    except DECODE_ERRORS as exc:
        return one_line(exc) or type(exc).__name__
    return None


def _listing_fingerprint(samples: Sequence[tuple]) -> str:
    """A digest of the files' names, labels (and split), sizes and mtimes: changes when the
    folder does."""
    digest = hashlib.sha256()
    for *tags, file, label in samples:
        stat = os.stat(file)
        line = "\t".join([*tags, file, str(label), str(stat.st_size), str(stat.st_mtime_ns)])
        digest.update(f"{line}\n".encode())
    return digest.hexdigest()


def _read_index_or_none(index_path: Path) -> dict[str, Any] | None:
    """The index at ``index_path``, or None if there is none or it is unreadable."""
    try:
        return read_index(index_path) if index_path.is_file() else None
    except DatasetError:
        return None
