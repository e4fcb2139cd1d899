"""All-reduce bus bandwidth between the GPUs of this machine through torch's NCCL (a yardstick for our own
NCCL buckets): torchrun --standalone --nproc_per_node N scripts/device/nccl-bw.py. Prints one line per size/dtype."""
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
for dtype in (torch.float32, torch.bfloat16):
    for mb in (25, 200):
        x = torch.ones(mb * 2**20 // x_size if (x_size := torch.tensor([], dtype=dtype).element_size()) else 0,
                       dtype=dtype, device="cuda")
        for _ in range(3): dist.all_reduce(x)
        torch.cuda.synchronize(); t = time.perf_counter(); n = 20
        for _ in range(n): dist.all_reduce(x)
        torch.cuda.synchronize(); dt = (time.perf_counter() - t) / n
        if rank == 0:
            busbw = x.numel() * x.element_size() * 2 * (world - 1) / world / dt / 1e9
            print(f"all_reduce {dtype} {mb} MiB: {dt*1e3:.3f} ms, bus bandwidth {busbw:.1f} GB/s", flush=True)
dist.destroy_process_group()
