import os

from batchscope.bench import envinfo


def test_runtime_records_versions_device_blas_and_a_stable_fingerprint():
    info = envinfo.runtime("cpu")
    assert info["packages"]["torch"] and info["packages"]["torchvision"]
    assert info["device_type"] == "cpu"
    assert "torch" in info["blas"] and "numpy" in info["blas"]
    assert info["default_threads"]["intraop"] >= 1
    assert len(info["fingerprint"]) == 12
    assert envinfo.runtime("cpu")["fingerprint"] == info["fingerprint"]


def test_fingerprint_follows_software_not_per_job_settings(monkeypatch):
    info = envinfo.runtime("cpu")
    changed = {**info, "packages": {**info["packages"], "numpy": "0.0.0"}}
    assert envinfo.fingerprint(changed) != info["fingerprint"]
    monkeypatch.setenv("PYTHONHASHSEED", "12345")
    reseeded = envinfo.runtime("cpu")
    assert reseeded["env"]["PYTHONHASHSEED"] == "12345"
    assert reseeded["fingerprint"] == info["fingerprint"]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # Snakemake sets it from each job's threads
    assert envinfo.runtime("cpu")["fingerprint"] == info["fingerprint"]
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")  # picks other BLAS kernels
    assert envinfo.runtime("cpu")["fingerprint"] != info["fingerprint"]


def test_capture_adds_pip_freeze_git_and_snakemake(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    info = envinfo.capture("cpu", workflow_dir=repo, snakemake_version="9.27.1")
    assert any(line.startswith("torch==") for line in info["pip_freeze"])
    assert info["snakemake"] == "9.27.1"
    assert set(info["workflow_git"]) == {"commit", "dirty"}
    assert info["fingerprint"] == envinfo.runtime("cpu")["fingerprint"]
    assert "BLAS_INFO" in info["torch_config"] or "blas" in info["torch_config"].lower()


def test_runtime_names_the_torch_build_the_reports_show():
    import torch

    assert envinfo.runtime("cpu")["torch"] == torch.__version__
