# Resources of runs on several devices: nodes, tasks, GPUs and the torchrun launcher
# (included by common.smk).


# --- runs on several devices (`devices`; rule bench_ddp) ---
# One node holds `slurm.gpus_per_node` devices: a run of N <= that is one torchrun on one node
# (one SLURM task per device, N GPUs unless the device is the CPU); a larger run takes
# N / gpus_per_node whole nodes, one torchrun (one task) per node, joined by a c10d rendezvous
# on the first node. The rule's `mpi` resource makes the SLURM executor run the job's command
# as it is, without wrapping it in `srun -n1`.
GPUS_PER_NODE = config["slurm"]["gpus_per_node"]
DDP_PORT = 29500  # the c10d rendezvous port on a multi-node run's first node


def ddp_devices(wildcards):
    return paths.devices_of(wildcards.devices_tag)


def ddp_nodes(wildcards):
    return max(1, -(-ddp_devices(wildcards) // GPUS_PER_NODE))


def ddp_tasks(wildcards):
    """One task per device on one node; one per node (its torchrun) across nodes."""
    nodes = ddp_nodes(wildcards)
    return ddp_devices(wildcards) if nodes == 1 else nodes


def ddp_gpus(wildcards):
    """The GPUs of a one-node job (none for CPU runs); across nodes see ddp_gres."""
    cpu = config["device"] == "cpu"
    return 0 if cpu or ddp_nodes(wildcards) > 1 else ddp_devices(wildcards)


def ddp_gres(wildcards):
    """Across nodes, every node's GPUs (a gres is per node); nothing otherwise."""
    cpu = config["device"] == "cpu"
    return "" if cpu or ddp_nodes(wildcards) == 1 else f"gpu:{GPUS_PER_NODE}"


def ddp_tasks_per_gpu(wildcards):
    """One task per GPU on one node; across nodes a task (a torchrun) drives a node's GPUs,
    and 0 leaves SLURM's --ntasks-per-gpu out."""
    return 1 if ddp_nodes(wildcards) == 1 else 0


def ddp_cpus_per_task(wildcards, threads):
    """Each rank's share of the job's threads plus its DataLoader workers, per task (per
    node's torchrun across nodes)."""
    devices = ddp_devices(wildcards)
    per_rank = max(1, threads // min(devices, GPUS_PER_NODE)) + int(
        wildcards.num_workers
    )
    return per_rank if ddp_nodes(wildcards) == 1 else per_rank * GPUS_PER_NODE


def ddp_launcher(wildcards):
    """torchrun: standalone on one node; across nodes, started once per node by srun."""
    devices, nodes = ddp_devices(wildcards), ddp_nodes(wildcards)
    torchrun = "python -m torch.distributed.run"
    if nodes == 1:
        return f"{torchrun} --standalone --nproc-per-node {devices}"
    need = f"batchscope: a run on {devices} devices spans {nodes} nodes: run it through SLURM"
    head = '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    return (
        f"srun --ntasks-per-node=1 --nodes={nodes} --kill-on-bad-exit=1 {torchrun}"
        f" --nnodes {nodes} --nproc-per-node {GPUS_PER_NODE}"
        f' --rdzv-id "${{SLURM_JOB_ID:?{need}}}" --rdzv-backend c10d'
        f" --rdzv-endpoint {head}:{DDP_PORT}"
    )
