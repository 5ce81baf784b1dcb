"""An image folder's kept listing: read while the folder is unchanged, listed anew when a class
folder gains an image or the folder gains a class, and never trusted when the file is broken."""

import os
import time
from pathlib import Path

import pytest

from batchscope.core import config, datasets, folder_index

AN_HOUR_AGO_S = 3600


def _settle(folder: Path) -> None:
    """Date every folder under ``folder`` an hour back: a folder left as it was (a listing taken
    just after a folder changed is not kept: folder_index.RACY_WINDOW_NS)."""
    past = time.time() - AN_HOUR_AGO_S
    for parent, dirs, _ in os.walk(folder):
        for name in dirs:
            os.utime(os.path.join(parent, name), (past, past))
    os.utime(folder, (past, past))


def _tree(root: Path, counts: dict[str, int]) -> Path:
    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"img{i:03d}.png").write_bytes(b"")
    _settle(root)
    return root


def _counts(folder: Path, cache: Path | None) -> datasets.ImageFolderCounts:
    """The folder's counts, its listing kept (as a config check that passes keeps it)."""
    counts, keep = folder_index.image_folder_counts(folder, cache)
    keep()
    return counts


class Listings:
    """Counts the folders read (os.scandir), and can forbid reading any."""

    def __init__(self, monkeypatch) -> None:
        self.reads = 0
        self.forbidden = False
        real = os.scandir

        def scandir(path):
            if self.forbidden:
                raise AssertionError(f"listed {path} although its listing was kept")
            self.reads += 1
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)


@pytest.fixture
def listings(monkeypatch) -> Listings:
    return Listings(monkeypatch)


def test_an_unchanged_folder_is_read_from_its_kept_listing(tmp_path, listings):
    folder = _tree(tmp_path / "images", {"cat": 3, "dog": 2})
    cache = tmp_path / "cache"
    first = folder_index.image_folder_listing(folder, cache)
    assert first == datasets.list_image_folder(folder)
    listings.forbidden = True
    assert folder_index.image_folder_listing(folder, cache) == first
    counts = _counts(folder, cache)
    assert counts == datasets.ImageFolderCounts(("cat", "dog"), (3, 2), None)


def test_the_config_check_reads_the_kept_counts(tmp_path, listings):
    folder = _tree(tmp_path / "images", {"cat": 3, "dog": 2})
    cache = tmp_path / "cache"
    cfg = {"dataset": {"name": "imagefolder", "path": str(folder)}, "models": ["small_cnn"]}
    cfg |= {"batch_sizes": [2], "modes": ["infer"], "measure": {"warmup_steps": 1}}
    schema = config.load_schema(config.SCHEMA_PATH)
    config.check(cfg, schema, cache)
    assert len(list(cache.iterdir())) == 1
    listings.forbidden = True
    config.check(cfg, schema, cache)
    with pytest.raises(config.ConfigError, match="batch_sizes"):  # the kept counts, checked
        config.check({**cfg, "batch_sizes": [64]}, schema, cache)


def test_a_config_that_stops_keeps_no_listing(tmp_path):
    folder = _tree(tmp_path / "images", {"cat": 3, "dog": 2})
    cache = tmp_path / "cache"
    cfg = {"dataset": {"name": "imagefolder", "path": str(folder)}, "models": ["small_cnn"]}
    cfg |= {"batch_sizes": [64], "modes": ["infer"], "measure": {"warmup_steps": 1}}
    with pytest.raises(config.ConfigError, match="batch_sizes"):
        config.check(cfg, config.load_schema(config.SCHEMA_PATH), cache)
    assert not cache.exists()


@pytest.mark.parametrize(
    "change",
    [
        "an image in a class folder",
        "an image in a folder below a class folder",
        "a class folder",
        "an image removed",
        "a val folder",
    ],
)
def test_a_changed_folder_is_listed_anew(tmp_path, change):
    folder = _tree(tmp_path / "images", {"cat": 3, "dog": 2})
    (folder / "cat" / "close ups").mkdir()
    (folder / "cat" / "close ups" / "a.png").write_bytes(b"")
    _settle(folder)
    cache = tmp_path / "cache"
    before = _counts(folder, cache)
    assert before.train == (4, 2)
    if change == "an image in a class folder":
        (folder / "dog" / "new.jpg").write_bytes(b"")
    elif change == "an image in a folder below a class folder":
        (folder / "cat" / "close ups" / "b.png").write_bytes(b"")
    elif change == "a class folder":
        (folder / "bird").mkdir()
        (folder / "bird" / "b.png").write_bytes(b"")
    elif change == "an image removed":
        (folder / "dog" / "img000.png").unlink()
    else:
        (folder / "val" / "cat").mkdir(parents=True)
        (folder / "val" / "cat" / "v.png").write_bytes(b"")
    after = _counts(folder, cache)
    assert after == datasets.list_image_folder(folder).counts
    assert after != before
    assert folder_index.image_folder_listing(folder, cache) == datasets.list_image_folder(folder)


def _kept(tmp_path: Path) -> tuple[Path, Path, Path]:
    folder = _tree(tmp_path / "images", {"cat": 3, "dog": 2})
    cache = tmp_path / "cache"
    folder_index.image_folder_listing(folder, cache)
    return folder, cache, Path(folder_index.cache_path(folder, cache))


@pytest.mark.parametrize(
    "damage", ["cut in half", "header cut", "not json", "a count changed", "a path changed"]
)
def test_a_broken_cache_file_is_not_trusted(tmp_path, listings, damage):
    folder, cache, kept = _kept(tmp_path)
    text = kept.read_bytes()
    if damage == "cut in half":
        kept.write_bytes(text[: len(text) // 2])
    elif damage == "header cut":
        kept.write_bytes(text[:40])
    elif damage == "not json":
        kept.write_bytes(b"\x00garbage\n" * 3)
    elif damage == "a count changed":
        kept.write_bytes(text.replace(b'"train_counts":[3,2]', b'"train_counts":[9,2]'))
    else:
        kept.write_bytes(text.replace(b"img001.png", b"img009.png"))
    reads = listings.reads
    listing = folder_index.image_folder_listing(folder, cache)
    assert listing == datasets.list_image_folder(folder)
    assert listings.reads > reads  # listed anew
    assert kept.read_bytes() == text  # and kept whole again


def test_another_folder_does_not_read_this_ones_listing(tmp_path):
    folder, cache, kept = _kept(tmp_path)
    other = _tree(tmp_path / "other", {"ant": 1})
    os.replace(kept, folder_index.cache_path(other, cache))  # a file named for another folder
    assert _counts(other, cache).classes == ("ant",)


def test_a_folder_changed_just_now_is_listed_but_not_kept(tmp_path):
    folder = tmp_path / "images"
    (folder / "cat").mkdir(parents=True)
    (folder / "cat" / "a.png").write_bytes(b"")  # its mtime: now, within the racy window
    cache = tmp_path / "cache"
    counts = _counts(folder, cache)
    assert counts.train == (1,)
    assert not Path(folder_index.cache_path(folder, cache)).exists()


def test_without_a_cache_folder_nothing_is_kept(tmp_path, monkeypatch):
    folder = _tree(tmp_path / "images", {"cat": 1})
    monkeypatch.chdir(tmp_path)
    assert _counts(folder, None).train == (1,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images"]
