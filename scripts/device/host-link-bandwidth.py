# On the GPU machine: the host <-> device copy rate through pinned memory (torch), one direction at a time and both
# at once on two streams, 1 GiB per copy, mean of 5 after a warm-up. What activation offloading can move per second.
import time
import torch

n = 1 << 30
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
dev2 = torch.empty(n, dtype=torch.uint8, device="cuda")
t0 = time.time()
host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
host2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
print(f"pinned 2 GiB in {time.time() - t0:.2f} s")
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()


def rate(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    t = time.time()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return reps * n / (time.time() - t) / 1e9


def both():
    with torch.cuda.stream(s1):
        host.copy_(dev, non_blocking=True)
    with torch.cuda.stream(s2):
        dev2.copy_(host2, non_blocking=True)


print(f"device -> host {rate(lambda: host.copy_(dev, non_blocking=True)):.1f} GB/s")
print(f"host -> device {rate(lambda: dev.copy_(host, non_blocking=True)):.1f} GB/s")
print(f"both at once   {rate(both):.1f} GB/s each way")

# The same copies while bf16 products run on the default stream (what offloading overlaps with).
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
copy_stream = torch.cuda.Stream()
for direction in ("device -> host", "host -> device"):
    torch.cuda.synchronize()
    t = time.time()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(copy_stream):
        start.record()
        for _ in range(5):
            if direction == "device -> host":
                host.copy_(dev, non_blocking=True)
            else:
                dev.copy_(host, non_blocking=True)
        end.record()
    for _ in range(60):
        a @ b
    torch.cuda.synchronize()
    print(f"{direction} during GEMMs {5 * n / start.elapsed_time(end) / 1e6:.1f} GB/s, "
          f"GEMMs+copies wall {time.time() - t:.3f} s")
torch.cuda.synchronize()
t = time.time()
for _ in range(60):
    a @ b
torch.cuda.synchronize()
print(f"GEMMs alone {time.time() - t:.3f} s")
