"""PyTorch's scaled_dot_product_attention on the GPU, for the same shapes as
gpu-attn's benchmark (8x512 and 1x4096 tokens with 16 heads of 64 and 128,
and MiniLM's own batch, 128x64 tokens with its 12 heads of 32), plus head
size 32 at 8x512 and 1x4096; fp16 and bf16; equal lengths, so no padding
either way. Through its flash backend, cuDNN's fused attention
(SDPBackend.CUDNN_ATTENTION) and the memory-efficient one, which PyTorch
picks for MiniLM's short sequences. Median of 20 CUDA-event timings after 3
warm-ups, TFLOP/s as 4*L^2*D*H per sequence. Prints NOT RUN and exits 3
without torch or a CUDA device."""
import sys

try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
except Exception as e:  # noqa: BLE001 - any import failure means not run
    print("NOT RUN: PyTorch with SDPA backends is not installed (%s)" % e)
    sys.exit(3)
if not torch.cuda.is_available():
    print("NOT RUN: PyTorch sees no CUDA device")
    sys.exit(3)

SHAPES = ((8, 512, 16, 32), (8, 512, 16, 64), (8, 512, 16, 128), (1, 4096, 16, 32),
          (1, 4096, 16, 64), (1, 4096, 16, 128), (128, 64, 12, 32))  # (B, L, heads, D)
BACKENDS = ((SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn"),
            (SDPBackend.EFFICIENT_ATTENTION, "efficient"))

print("torch %s on %s" % (torch.__version__, torch.cuda.get_device_name(0)))
print("%-10s %-5s %-4s %-9s %10s %10s" % ("shape", "type", "d", "sdpa", "ms", "TFLOP/s"))
for B, L, H, D in SHAPES:
    for dt, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=dt) for _ in range(3))
        for backend, bname in BACKENDS:
            try:
                with sdpa_kernel(backend):
                    times = []
                    for r in range(23):
                        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
                        a.record()
                        torch.nn.functional.scaled_dot_product_attention(q, k, v)
                        b.record()
                        torch.cuda.synchronize()
                        if r >= 3:
                            times.append(a.elapsed_time(b))
            except RuntimeError as e:
                print("%dx%-7d %-5s d%-3d %-9s NOT RUN: %s" % (B, L, name, D, bname,
                                                              str(e).splitlines()[0]))
                continue
            times.sort()
            ms = (times[9] + times[10]) / 2
            tf = 4.0 * L * L * D * H * B / (ms * 1e-3) / 1e12
            print("%dx%-7d %-5s d%-3d %-9s %10.4f %10.1f" % (B, L, name, D, bname, ms, tf),
                  flush=True)
