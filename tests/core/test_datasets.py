"""The image folder's listing and held-out split, as the config check and the jobs see them."""

from pathlib import Path

import pytest

from batchscope.core import datasets


def _tree(root: Path, counts: dict[str, int]) -> Path:
    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"img{i:03d}.png").write_bytes(b"")
    return root


def test_the_held_out_split_is_disjoint_stratified_and_fixed(tmp_path):
    listing = datasets.list_image_folder(_tree(tmp_path / "a", {"cat": 50, "dog": 30}))
    chosen = datasets.held_out(listing.train, 0.1)
    held = [s for s, out in zip(listing.train, chosen, strict=True) if out]
    kept = [s for s, out in zip(listing.train, chosen, strict=True) if not out]
    assert not {f for f, _ in held} & {f for f, _ in kept}
    assert [label for _, label in held].count(0) == 5 and [lb for _, lb in held].count(1) == 3
    # the same images wherever the folder lives, and whatever order it was listed in
    moved = datasets.list_image_folder(_tree(tmp_path / "b", {"cat": 50, "dog": 30}))
    again = datasets.held_out(list(reversed(moved.train)), 0.1)
    held_again = [s for s, out in zip(reversed(moved.train), again, strict=True) if out]
    names = sorted(Path(f).relative_to(tmp_path / "a").as_posix() for f, _ in held)
    assert sorted(Path(f).relative_to(tmp_path / "b").as_posix() for f, _ in held_again) == names
    # not simply the first or last files of each class
    assert names != sorted(
        [f"cat/img{i:03d}.png" for i in range(5)] + [f"dog/img{i:03d}.png" for i in range(3)]
    )


def test_adding_an_image_moves_at_most_one_other(tmp_path):
    folder = _tree(tmp_path / "a", {"cat": 29})
    before = datasets.list_image_folder(folder)
    held_before = {f for (f, _), out in zip(before.train, datasets.held_out(before.train, 0.1),
                                             strict=True) if out}  # fmt: skip
    (folder / "cat" / "new.png").write_bytes(b"")
    after = datasets.list_image_folder(folder)
    held_after = {f for (f, _), out in zip(after.train, datasets.held_out(after.train, 0.1),
                                           strict=True) if out}  # fmt: skip
    assert len(held_before ^ (held_after - {str(folder / "cat" / "new.png")})) <= 1


def test_a_class_never_loses_all_its_training_images():
    samples = [("one/a.png", 0), ("two/a.png", 1), ("two/b.png", 1)]
    chosen = datasets.held_out(samples, 0.9)
    assert chosen[0] is False and chosen[1:].count(True) == 1
    with pytest.raises(ValueError, match="val_fraction"):
        datasets.held_out(samples, 1.0)


def test_a_val_folder_is_the_held_out_split(tmp_path):
    folder = _tree(tmp_path / "beside", {"cat": 4, "dog": 3})
    _tree(folder / "val", {"dog": 2})
    listing = datasets.list_image_folder(folder)
    assert listing.classes == ("cat", "dog")
    assert [(Path(f).parent.name, label) for f, label in listing.val] == [("dog", 1)] * 2
    assert all("/val/" not in f for f, _ in listing.train) and len(listing.train) == 7
    sizes = datasets.image_folder_sizes(listing, 0.5)  # a val/ folder makes val_fraction moot
    assert (sizes.train, sizes.held_out) == (7, 2)

    split = _tree(tmp_path / "split" / "train", {"cat": 2, "dog": 2}).parent
    _tree(split / "val", {"cat": 1, "dog": 1})
    listing = datasets.list_image_folder(split)
    assert listing.classes == ("cat", "dog")
    assert (len(listing.train), len(listing.val)) == (4, 2)


def test_only_image_files_are_listed(tmp_path):
    folder = _tree(tmp_path / "a", {"cat": 2})
    (folder / "cat" / "notes.txt").write_text("x")
    (folder / "cat" / "UPPER.JPG").write_bytes(b"")
    (folder / "stray.png").write_bytes(b"")  # not in a class folder
    listing = datasets.list_image_folder(folder)
    assert sorted(Path(f).name for f, _ in listing.train) == [
        "UPPER.JPG",
        "img000.png",
        "img001.png",
    ]


def test_work_split_reads_every_image_of_a_folder_for_inference():
    assert datasets.work_split("imagefolder", "infer") == "all"
    assert datasets.work_split("imagefolder", "train") == "train"
    assert datasets.work_split("cifar10", "infer") == "test"
