"""The tiny Fashion-MNIST sweep that several end-to-end modules read (the table, the report,
the README's commands, the browser test): run once per session, then its HTML report."""

from __future__ import annotations

import pytest

from tests.workflow.helpers import DEBIAN_FMNIST, TINY, snakemake, write_config


@pytest.fixture(scope="session")
def fmnist_run(tmp_path_factory):
    """The tiny sweep on real Fashion-MNIST, then the HTML report: (workdir, config path)."""
    if not DEBIAN_FMNIST.is_dir():
        pytest.skip("needs Debian's dataset-fashion-mnist package")
    workdir = tmp_path_factory.mktemp("sweep")
    config = write_config(workdir, **TINY)
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    report = snakemake(workdir, "--cores", "1", "--configfile", str(config), "--report",
                       "results/report.html")  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    return workdir, config
