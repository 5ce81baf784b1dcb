"""An image folder's listing, kept once per state of the folder: the workflow's parse (every job
parses the Snakefile, and on a cluster every job is a process of its own) and the indexing job
read it instead of listing a million files again.

The cache file (under ``paths.FOLDER_LISTINGS``, named by a digest of the folder's absolute
path) holds two JSON lines: a header (the folder, the stat of every folder the listing read, the
classes and how many images each has) and the listing itself (each image's path below the
folder and its label). A folder's mtime moves when an entry is added to it, removed from it or
renamed in it, so the listing is fresh while every folder it read (the top folder, ``train/``
and ``val/``, each class folder and the folders below them) has the mtime, ctime and inode it
had: a check stats those folders and reads the header, and never lists a file. The config check
needs only the counts; the indexing job reads the listing too.

A listing taken while a folder was changing is not kept: a folder whose mtime lies within
:data:`RACY_WINDOW_NS` of the listing's start may change again without its mtime moving (file
systems keep coarse times); one changed later gets a newer mtime than the one kept. A cache file
that cannot be read, whose length is not the one its header says, or whose header or listing
does not hash to the digest the header holds, is not trusted: the folder is listed anew.

No torch: the Snakefile imports it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

from batchscope.core import datasets, results

FORMAT = "batchscope-folder-listing"
#: Raised when what a listing holds or how it is read changes: older files are then listed anew.
VERSION = 1
#: A folder changed this recently when the listing began may change again unseen (see above).
RACY_WINDOW_NS = 2_000_000_000


def cache_path(folder: str | os.PathLike, cache_dir: str | os.PathLike) -> str:
    """The cache file of the image folder ``folder`` under ``cache_dir``."""
    key = hashlib.sha256(os.path.abspath(os.fspath(folder)).encode()).hexdigest()[:24]
    return os.path.join(os.fspath(cache_dir), f"{key}.jsonl")


def _signature(stat: os.stat_result) -> list[int]:
    return [stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _prefix(folder: str) -> str:
    return os.path.join(folder, "")


def _is_fresh(header: dict[str, Any], folder: str) -> bool:
    """Whether every folder the cached listing read is as it was then."""
    prefix = _prefix(folder)
    for relative, signature in header["folders"]:
        try:
            stat = os.stat(prefix + relative if relative else folder)
        except OSError:
            return False
        if _signature(stat) != signature:
            return False
    return True


def _digest(header: dict[str, Any]) -> str:
    """The digest of a header's fields (its own digest left out)."""
    fields = {key: value for key, value in header.items() if key != "header_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _read_header(handle, folder: str) -> dict[str, Any] | None:
    """The cache file's header if it is this folder's, whole, sound and fresh; else None."""
    try:
        head = handle.readline()
        header = json.loads(head)
        whole = os.fstat(handle.fileno()).st_size == len(head) + header["body_bytes"]
        if (
            header.get("header_sha256") != _digest(header)
            or header.get("format") != FORMAT
            or header.get("version") != VERSION
            or header.get("folder") != folder
            or not whole
        ):
            return None
        return header if _is_fresh(header, folder) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _read_body(handle, header: dict[str, Any], folder: str) -> datasets.ImageFolderListing | None:
    """The listing after the header, if it hashes to the header's digest; else None."""
    body = handle.read()
    digest = hashlib.sha256(body).hexdigest()
    if len(body) != header["body_bytes"] or digest != header["body_sha256"]:
        return None
    try:
        parts = json.loads(body)
        prefix = _prefix(folder)
        train = tuple((prefix + relative, int(label)) for relative, label in parts["train"])
        val = parts["val"]
        if val is not None:
            val = tuple((prefix + relative, int(label)) for relative, label in val)
        return datasets.ImageFolderListing(tuple(header["classes"]), train, val)
    except (ValueError, KeyError, TypeError):
        return None


def _counts(header: dict[str, Any]) -> datasets.ImageFolderCounts:
    return datasets.ImageFolderCounts(
        tuple(header["classes"]), tuple(header["train_counts"]), header["val_count"]
    )


def _cached(folder: str, cache_file: str, whole: bool):
    """What the cache file holds of ``folder`` (its counts, or with ``whole`` its listing) if
    it is fresh and sound; else None."""
    try:
        with open(cache_file, "rb") as handle:
            header = _read_header(handle, folder)
            if header is None:
                return None
            if not whole:
                return _counts(header)
            return _read_body(handle, header, folder)
    except OSError:
        return None


def _write(cache_file: str, folder: str, listing: datasets.ImageFolderListing, seen) -> None:
    prefix = _prefix(folder)
    cut = len(prefix)

    def relative(samples):
        return [[file[cut:] if file.startswith(prefix) else file, label] for file, label in samples]

    body = json.dumps(
        {
            "train": relative(listing.train),
            "val": None if listing.val is None else relative(listing.val),
        },
        separators=(",", ":"),
    ).encode()
    counts = listing.counts
    header = {
        "format": FORMAT,
        "version": VERSION,
        "folder": folder,
        "folders": [
            ["" if path == folder else path[cut:], _signature(stat)] for path, stat in seen
        ],
        "classes": list(counts.classes),
        "train_counts": list(counts.train),
        "val_count": counts.val,
        "body_bytes": len(body) + 1,  # the final newline
        "body_sha256": hashlib.sha256(body + b"\n").hexdigest(),
    }
    header["header_sha256"] = _digest(header)
    head = json.dumps(header, separators=(",", ":")).encode()
    results.write_bytes(cache_file, head + b"\n" + body + b"\n")


def _is_racy(seen: datasets.FolderStats, start_ns: int) -> bool:
    """Whether a folder was changed so shortly before ``start_ns`` that a change after it was
    read might have left its mtime as it was."""
    return max(stat.st_mtime_ns for _, stat in seen) >= start_ns - RACY_WINDOW_NS


def _keep_nothing() -> None:
    """What keeps a listing read from its cache file, or taken while its folder changed."""


def _listed(
    folder: str, cache_file: str | None
) -> tuple[datasets.ImageFolderListing, Callable[[], None]]:
    """``folder`` listed now, and what keeps that listing in ``cache_file`` (nothing without
    one, or when the folder was changing)."""
    seen: datasets.FolderStats = []
    start_ns = time.time_ns()
    listing = datasets.list_image_folder(folder, seen)
    if cache_file is None or _is_racy(seen, start_ns):
        return listing, _keep_nothing

    def keep() -> None:
        # a cache that cannot be written is only a cache: the next check lists again
        with contextlib.suppress(OSError):
            _write(cache_file, folder, listing, seen)

    return listing, keep


def image_folder_listing(
    path: str | os.PathLike, cache_dir: str | os.PathLike | None
) -> datasets.ImageFolderListing:
    """The images under ``path`` (:func:`datasets.list_image_folder`), from the cache under
    ``cache_dir`` while the folder is as it was; listed (and kept) otherwise. Without
    ``cache_dir``, listed."""
    folder = os.path.abspath(os.fspath(path))
    cache_file = None if cache_dir is None else cache_path(folder, cache_dir)
    if cache_file is not None:
        listing = _cached(folder, cache_file, whole=True)
        if listing is not None:
            return listing
    listing, keep = _listed(folder, cache_file)
    keep()
    return listing


def image_folder_counts(
    path: str | os.PathLike, cache_dir: str | os.PathLike | None
) -> tuple[datasets.ImageFolderCounts, Callable[[], None]]:
    """How many images each class of ``path`` has: the cache's header while the folder is as it
    was (no file is listed), else the counts of a listing taken now; and what keeps that
    listing under ``cache_dir``, for the caller to call once the counts passed its checks (a
    config that stops leaves no file)."""
    folder = os.path.abspath(os.fspath(path))
    cache_file = None if cache_dir is None else cache_path(folder, cache_dir)
    if cache_file is not None:
        counts = _cached(folder, cache_file, whole=False)
        if counts is not None:
            return counts, _keep_nothing
    listing, keep = _listed(folder, cache_file)
    return listing.counts, keep
