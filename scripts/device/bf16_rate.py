# The device's dense bf16 matrix rate (cuBLAS through PyTorch, which the GPU image has), to set
# ds4-bench's prefill TFLOP/s against (issue 13): best of 5 timings of 10 products each.
#   python3 scripts/device/bf16_rate.py [N]
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
for _ in range(3):
    c = a @ b
torch.cuda.synchronize()
best = 0.0
for _ in range(5):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        c = a @ b
    e1.record()
    torch.cuda.synchronize()
    s = e0.elapsed_time(e1) / 1e3 / 10
    best = max(best, 2.0 * n**3 / s / 1e12)
print(f"bf16 dense GEMM {n}x{n}x{n} (PyTorch {torch.__version__}, cuBLAS): {best:.1f} TFLOP/s "
      f"on {torch.cuda.get_device_name()}")
