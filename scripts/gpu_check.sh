#!/usr/bin/env bash
# GPU check: the harness against a bare loop (scripts/sync_check.py), then a small CUDA sweep
# end to end, its summary and recommendation, and the energy it read from NVML.
# Usage (on a machine with an NVIDIA GPU):  bash scripts/gpu_check.sh [outdir]
# Creates .venv if needed (as `make` does), runs in its own folder, leaves the repo untouched.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo/results-gpu-check}"
cd "$repo"
make --no-print-directory .venv/.installed
export PATH="$repo/.venv/bin:$PATH" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
python -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA GPU'; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
# issue 12: the harness against a bare loop, with and without a synchronisation per step
PYTHONPATH="$repo" python "$repo/scripts/sync_check.py" --seconds 3
mkdir -p "$out"
snakemake -s "$repo/Snakefile" --directory "$out" --configfile "$repo/config/gpu_check.yaml" \
    --cores "$(nproc)"
snakemake -s "$repo/Snakefile" --directory "$out" --configfile "$repo/config/gpu_check.yaml" \
    --cores 1 --report "$out/results/report.html"
python - "$out/results/summary.csv" <<'PY'
import sys
import pandas as pd
cols = ["mode", "batch_size", "num_workers", "round", "status", "samples_per_s",
        "step_time_ms_p50", "data_wait_frac", "peak_mem_mb", "cuda_max_reserved_mb",
        "cuda_peak_device_mb", "math_mode", "peak_tflops", "mfu", "gpu_util_pct_mean",
        "foreign_cpu_frac"]
print(pd.read_csv(sys.argv[1])[cols].to_string(index=False))
PY
cat "$out/results/recommendation.md"
# issue 23: every run forked from the warm interpreter (sweep.launch: warm), each on the GPU: the
# warm interpreter imported torch without touching CUDA, so its children could initialise it
python - "$out/results/summary.csv" <<'PY'
import sys
import pandas as pd
summary = pd.read_csv(sys.argv[1])
print(summary.groupby(["launch", "device", "status"]).size().to_string())
assert (summary["launch"] == "forked").all(), "a run started fresh: see its log's first line"
assert summary["device"].astype(str).str.startswith("cuda").all()
PY
# issue 14: the energy read: NVML's counter over each run's measured span (Volta and later)
python - "$out/results/summary.csv" "$out/results/recommendation.json" <<'PY'
import json, sys
import pandas as pd
summary = pd.read_csv(sys.argv[1])
ok = summary[summary["status"] == "ok"]
cols = ["mode", "batch_size", "num_workers", "round", "energy_source", "energy_j_per_sample",
        "mean_power_w", "power_limit_w", "samples_per_s"]
print(ok[cols].to_string(index=False))
for answer in json.load(open(sys.argv[2]))["answers"]:
    print(answer["mode"], answer["model"], json.dumps(answer["objectives"]))
assert (ok["energy_source"] == "nvml").all(), "energy not read from NVML: " + "; ".join(
    sorted(set(ok["energy_source"].astype(str))))
assert (ok["energy_j_per_sample"] > 0).all() and (ok["mean_power_w"] > 0).all()
print("energy: nvml, J/sample", ok["energy_j_per_sample"].min(), "to", ok["energy_j_per_sample"].max(),
      "mean W", ok["mean_power_w"].min(), "to", ok["mean_power_w"].max())
PY
# issue 12: the largest-batch search on the device (reserved memory + context against the
# device's total; batch 1, which BatchNorm refuses in training, is a result, not a crash)
snakemake -s "$repo/Snakefile" --directory "$out-search" --configfile "$repo/config/gpu_check.yaml" \
    --config batch_sizes=auto --cores "$(nproc)" results/maxbatch/train/resnet18.json
python - "$out-search/results/maxbatch/train/resnet18.json" <<'PY'
import json, sys
found = json.load(open(sys.argv[1]))
print(found["summary"])
for t in found["trials"]:
    print({k: t.get(k) for k in ("batch_size", "fits", "status", "cuda_max_allocated_mb", "cuda_peak_device_mb",
                                 "cuda_max_reserved_mb", "peak_mem_mb")})
PY
# issue 14: data-parallel runs on 1 vs 2 GPUs (torchrun, NCCL), only where two GPUs are present:
# per-rank throughput and the scaling efficiency of each point
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [ "${gpus:-0}" -ge 2 ]; then
    mkdir -p "$out-ddp"
    printf 'devices: [1, 2]\nmodes: [train]\nbatch_sizes: [256, 1024]\nnum_workers: [4]\n' \
        > "$out-ddp/ddp.yaml"  # on top of config/gpu_check.yaml
    snakemake -s "$repo/Snakefile" --directory "$out-ddp" --configfile "$repo/config/gpu_check.yaml" \
        "$out-ddp/ddp.yaml" --cores "$(nproc)"
    python - "$out-ddp/results/summary.csv" <<'PY'
import sys
import pandas as pd
cols = ["mode", "batch_size", "devices", "round", "status", "samples_per_s", "samples_per_s_per_rank",
        "global_batch_size", "data_wait_frac", "peak_mem_mb", "scaling_efficiency"]
print(pd.read_csv(sys.argv[1])[cols].to_string(index=False))
PY
    grep -i "devices" "$out-ddp/results/recommendation.md" || true
    # issue 25: a rank out of memory is the point's result, not a hang: rank 1 fails at its
    # third step while rank 0 goes on into the step's NCCL all-reduce; rank 1 writes the oom
    # result and exits, torchrun stops rank 0 at once (not after the 10-minute timeout)
    oom="$out-ddp-oom"
    point="results/runs/train/resnet18/bs256_acc1_nw4_dev2_seed0_round1.json"
    mkdir -p "$oom"
    printf 'devices: [2]\nmodes: [train]\nbatch_sizes: [256]\nnum_workers: [4]\n' > "$oom/oom.yaml"
    started=$SECONDS
    BATCHSCOPE_OOM_AT=1:3 timeout 300 snakemake -s "$repo/Snakefile" --directory "$oom" "$point" \
        --configfile "$repo/config/gpu_check.yaml" "$oom/oom.yaml" --cores "$(nproc)"
    echo "the oom point: $((SECONDS - started)) s, model check included"
    python - "$oom/$point" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print({k: r[k] for k in ("status", "oom_rank", "oom_step", "world_size", "steps_run", "error")})
assert (r["status"], r["oom_rank"], r["oom_step"]) == ("oom", 1, 3), r
PY
    tail -n 1 "$oom/logs/bench/train/resnet18/bs256_acc1_nw4_dev2_seed0_round1.log"
else
    echo "multi-GPU check skipped: ${gpus:-0} GPU(s), it needs 2"
fi
