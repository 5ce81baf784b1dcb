"""The user's own Datasets (``dataset: python``): the factory's mistakes are one line each,
naming the dataset; items become (input, target); DataLoader workers can rebuild them."""

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from batchscope.bench import pydata
from batchscope.bench.data import DatasetError

DATA = textwrap.dedent(
    """
    import torch
    from torch.utils.data import Dataset, IterableDataset


    class Squares(Dataset):
        def __init__(self, n, classes=4):
            self.n, self.classes = n, classes

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            return torch.full((3, 8, 8), float(i)), i % self.classes


    class Dicts(Squares):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return {"pixel_values": x, "labels": y, "id": i}


    class Stream(IterableDataset):
        def __iter__(self):
            yield torch.zeros(3), 0


    def build(n=12):
        return Squares(n), Squares(4)


    def as_mapping(n=12):
        return {"train": Dicts(n), "val": None}


    def no_val():
        return Squares(12), None


    def one_thing():
        return Squares(12)


    def stream():
        return Stream(), None


    def bare_tensors():
        return [torch.zeros(3)] * 4, None


    def triples():
        return [(torch.zeros(3), 0, "x")] * 4, None


    def big_targets():
        return [(torch.zeros(3), 9)] * 4, None


    def not_tensors():
        return [([0.0, 1.0], 0)] * 4, None


    def raises():
        raise OSError("no such shard")


    def empty():
        return Squares(0), None
    """
)


@pytest.fixture
def data_file(tmp_path) -> Path:
    path = tmp_path / "data.py"
    path.write_text(DATA)
    return path


def spec(data_file: Path, function: str = "build", **kwargs) -> dict:
    return {
        "factory": f"{data_file}:{function}",
        "kwargs": kwargs,
        "file_sha256": None,
        "num_classes": 4,
    }


def test_a_pair_of_datasets_opens_as_train_and_both_for_inference(data_file):
    work, val = pydata.open_splits(spec(data_file, n=10), "train")
    assert len(work.dataset) == 10 and len(val.dataset) == 4
    assert work.channels == 3 and work.image_size == 8 and work.num_classes == 4
    x, y = work.dataset[5]
    assert torch.equal(x, torch.full((3, 8, 8), 5.0)) and y == 1
    everything, _ = pydata.open_splits(spec(data_file, n=10), "all")
    assert len(everything.dataset) == 14


def test_mapping_items_give_their_input_and_target(data_file):
    work, val = pydata.open_splits(spec(data_file, "as_mapping"), "all")
    assert val is None and len(work.dataset) == 12
    x, y = work.dataset[3]
    assert x.shape == (3, 8, 8) and y == 3
    batch_x, batch_y = next(iter(DataLoader(work.dataset, batch_size=4)))
    assert batch_x.shape == (4, 3, 8, 8) and batch_y.tolist() == [0, 1, 2, 3]


MISTAKES = [
    ("missing", {}, "data.py has no function 'missing'"),
    ("one_thing", {}, "returned a Squares; expected (train, val)"),
    ("stream", {}, "its train is a Stream, not a Dataset with __len__"),
    ("bare_tensors", {}, "train[0] is a Tensor; items must be (input, target)"),
    ("triples", {}, "train[0] is a tuple of 3; items must be"),
    ("big_targets", {}, "the target of train[0] is 9, outside 0 .. 3"),
    ("not_tensors", {}, "the input of train[0] is a list, not a torch.Tensor"),
    ("raises", {}, "raised OSError: no such shard"),
    ("empty", {}, "its train Dataset is empty"),
    ("build", {"size": 3}, "raised TypeError"),
]


@pytest.mark.parametrize(("function", "kwargs", "message"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_of_the_factory_is_one_line_naming_the_dataset(
    data_file, function, kwargs, message
):
    with pytest.raises(DatasetError) as caught:
        pydata.open_splits(spec(data_file, function, **kwargs), "train")
    text = str(caught.value)
    assert text.startswith("dataset python: ") and message in text and "\n" not in text


def test_a_missing_factory_file_is_one_line_naming_the_dataset(tmp_path):
    with pytest.raises(DatasetError, match=r"^dataset python: factory file .*nope\.py not found"):
        pydata.open_splits(spec(tmp_path / "nope.py"), "train")


def test_spawned_workers_rebuild_the_dataset_from_the_factorys_file(data_file):
    """A worker started by spawn imports nothing of this process: the Dataset's class lives in
    the user's file, which the worker must import before unpickling it."""
    work, _ = pydata.open_splits(spec(data_file, n=8), "all")
    loader = DataLoader(work.dataset, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    batches = [y.tolist() for _, y in loader]
    assert sorted(sum(batches, [])) == sorted([i % 4 for i in range(8)] + [0, 1, 2, 3])


def test_a_pickled_dataset_loads_in_a_fresh_interpreter(data_file, tmp_path):
    work, _ = pydata.open_splits(spec(data_file, "as_mapping"), "train")
    payload = tmp_path / "dataset.pkl"
    payload.write_bytes(pickle.dumps(work.dataset))
    code = (
        "import pickle, sys; d = pickle.loads(open(sys.argv[1], 'rb').read());"
        " x, y = d[7]; print(len(d), tuple(x.shape), y)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(payload)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["12", "(3,", "8,", "8)", "3"]


def test_workers_in_the_runs_loader_read_the_dataset(data_file):
    """The loader a benchmark run makes (fork, two workers) reads every sample once."""
    from batchscope.bench.steps import make_loader
    from tests.factories import make_spec

    work, _ = pydata.open_splits(spec(data_file, n=16), "train")
    run = make_spec(mode="infer", num_workers=2, batch_size=4)
    cpu = torch.device("cpu")
    loader = make_loader(work.dataset, run, cpu, batch_size=4, shuffle=False, drop_last=True)
    seen = torch.cat([x[:, 0, 0, 0] for x, _ in loader])
    assert sorted(seen.tolist()) == [float(i) for i in range(16)]


def _check_spec(data_file: Path, function: str = "build", **changes) -> dict:
    from batchscope.core import model_check_spec
    from tests.factories import sweep_config

    dataset = {"name": "python", "image_size": None, "factory": f"{data_file}:{function}"}
    config = sweep_config(dataset={**dataset, "num_classes": 4, "kwargs": {}}, **changes)
    return model_check_spec.check_spec(config, "small_cnn")


def test_the_model_check_feeds_the_model_the_datasets_first_input(data_file):
    from batchscope.bench.model_check import check

    found = check(_check_spec(data_file, batch_sizes=[4]))
    assert found["input_shape"] == [3, 8, 8] and found["output_shape"] == [1, 4]
    assert found["dataset_samples"] == {"train": 12, "val": 4}


def test_the_model_check_holds_the_datasets_length_against_the_batch_sizes(data_file):
    from batchscope.bench.model_check import check
    from batchscope.core.config import ConfigError

    # 12 training samples, warm-up 1 step: a batch of 8 gives 1 step, nothing to measure
    spec = _check_spec(data_file, batch_sizes=[4, 8], modes=["train"], measure={"warmup_steps": 1})
    with pytest.raises(ConfigError) as caught:
        check(spec)
    assert str(caught.value).startswith("config key batch_sizes[1]: train batches of 8 give 1")
    assert "12 samples in the python dataset's train Dataset" in str(caught.value)


def test_a_target_without_a_validation_dataset_is_refused_by_the_check(data_file):
    from batchscope.bench.model_check import check

    spec = _check_spec(data_file, "no_val", batch_sizes=[4], train={"target_accuracy": 0.5})
    with pytest.raises(DatasetError, match=r"^dataset python: the factory gave no validation"):
        check(spec)
