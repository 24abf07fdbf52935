# A small data-parallel training run for the real node's tests: a linear
# model fitted to a fixed synthetic regression with DistributedDataParallel
# over gloo (CPU). Each rank trains on its own shard; the loss, averaged
# over all ranks, is printed each step. torchrun sets RANK, WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT.
#
# Rank 0 checkpoints every step to $TRAINOPS_CHECKPOINT_DIR (when set), and
# every rank resumes from the last checkpoint there, so a restarted or
# rerun PyJob goes on where it stopped. At the end rank 0 writes the model
# to $OUTPUT_PATH/checkpoint.pt.
#
# Each rank prints the GPUs the device plugin gave its container:
# NVIDIA_VISIBLE_DEVICES lists them, or, under the plugin's volume-mounts
# strategy, names a folder holding one entry per GPU.
#
# FAIL_RANK and FAIL_STEP make that rank exit 1 at the start of that step,
# in the first attempt only (TRAINOPS_RESTART_ATTEMPT 0). STEP_SECONDS
# makes each step last at least that long, for a run that must still be
# running when something happens to it.
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = os.environ.get("TRAINOPS_RESTART_ATTEMPT", "0")
visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
if os.path.isdir(visible):
    gpus = sorted(os.listdir(visible))
else:
    gpus = [g for g in visible.split(",") if g]
print(f"rank={rank} gpus={','.join(gpus)}", flush=True)
torch.manual_seed(0)
x = torch.randn(512, 3)
y = x @ torch.tensor([[2.0], [-3.0], [0.5]]) + 1.0
shard = torch.randperm(512, generator=torch.Generator().manual_seed(rank))[:128]
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = int(os.environ.get("STEPS", "20"))
step_seconds = float(os.environ.get("STEP_SECONDS", "0"))

ckpt_dir = os.environ.get("TRAINOPS_CHECKPOINT_DIR", "")
ckpt = os.path.join(ckpt_dir, "last.pt") if ckpt_dir else ""
start = 0
if ckpt and os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
    print(f"rank={rank} attempt={attempt} resumed from the checkpoint of step {start}", flush=True)
else:
    print(f"rank={rank} attempt={attempt} starting from scratch", flush=True)

fail_rank, fail_step = os.environ.get("FAIL_RANK"), os.environ.get("FAIL_STEP")
for step in range(start, steps):
    if attempt == "0" and fail_rank == str(rank) and fail_step == str(step):
        print(f"rank={rank} failing on purpose at step {step}", file=sys.stderr, flush=True)
        sys.exit(1)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    print(f"rank={rank} world={world} step={step} loss={mean.item() / world:.6f}", flush=True)
    if ckpt and rank == 0:
        os.makedirs(ckpt_dir, exist_ok=True)
        # Written aside, then renamed: a rank stopped mid-write leaves the
        # last whole checkpoint.
        torch.save({"step": step + 1, "model": model.module.state_dict(), "opt": opt.state_dict()}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(step_seconds)
    # No rank starts the next step before rank 0 has saved this one.
    dist.barrier()
if rank == 0:
    path = os.path.join(os.environ.get("OUTPUT_PATH", "/tmp"), "checkpoint.pt")
    torch.save({"step": steps, "model": model.module.state_dict()}, path)
    print(f"checkpoint written to {path}", flush=True)
dist.barrier()
dist.destroy_process_group()
