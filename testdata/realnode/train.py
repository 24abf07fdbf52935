# A small data-parallel training run for the real node's tests: a linear
# model fitted to a fixed synthetic regression with DistributedDataParallel
# over gloo (CPU). Each rank trains on its own shard; the loss, averaged
# over all ranks, is printed each step; rank 0 writes a checkpoint to
# $OUTPUT_PATH. torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
x = torch.randn(512, 3)
y = x @ torch.tensor([[2.0], [-3.0], [0.5]]) + 1.0
shard = torch.randperm(512, generator=torch.Generator().manual_seed(rank))[:128]
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = int(os.environ.get("STEPS", "20"))
for step in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    print(f"rank={rank} world={world} step={step} loss={mean.item() / world:.6f}", flush=True)
if rank == 0:
    path = os.path.join(os.environ.get("OUTPUT_PATH", "/tmp"), "checkpoint.pt")
    torch.save({"step": steps, "model": model.module.state_dict()}, path)
    print(f"checkpoint written to {path}", flush=True)
dist.barrier()
dist.destroy_process_group()
