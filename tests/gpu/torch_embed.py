"""torch_embed.py MODEL_DIR — PyTorch's embeddings/s on the engine's
benchmark batch (gpu-engine's: 128 sequences of 64 tokens, [CLS] and [SEP]
around synthetic ids, every token attended), the peer of the cuda engine in
bf16: transformers' AutoModel in bf16 with attn_implementation="sdpa", mean
pooling and L2 normalisation as sentence-transformers does, run eagerly and
then under torch.compile(mode="reduce-overhead") (CUDA graphs; it compiles
MiniLM in seconds, where max-autotune takes minutes). The model is loaded as
bf16 from whatever dtype the directory holds (the GPU bundle's is fp16).
Median of ROUNDS timed batches after warm-ups, embeddings/s, each line
printed as soon as measured so that a compile cut short by the caller's
timeout still leaves the eager figure. Exit 3 (NOT RUN) without torch,
transformers or a CUDA device. --device cpu runs the same script where there
is no GPU, to check it, not to compare."""
import argparse
import statistics
import sys
import time

try:
    import torch
    from transformers import AutoModel
except Exception as e:  # noqa: BLE001 - any import failure means not run
    print("NOT RUN: torch or transformers is not installed (%s)" % e)
    sys.exit(3)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def batch(B, L, device):
    """gpu-engine's synthetic ids: 101 .. 102 around an LCG's draws."""
    s, rows = 3, []
    for _ in range(B):
        row = []
        for t in range(L):
            s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
            row.append(101 if t == 0 else 102 if t == L - 1 else 1000 + (s >> 8) % 20000)
        rows.append(row)
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    return ids, torch.ones_like(ids)


def rate(fn, ids, mask, rounds, warmup):
    for _ in range(warmup):
        fn(ids, mask)
    sync(ids.device.type)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(ids, mask)
        sync(ids.device.type)
        times.append(time.perf_counter() - t0)
    return ids.shape[0] / statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("NOT RUN: PyTorch sees no CUDA device")
        sys.exit(3)
    torch.set_grad_enabled(False)
    model = AutoModel.from_pretrained(a.model, torch_dtype=torch.bfloat16,
                                      attn_implementation="sdpa").to(a.device).eval()

    def embed(ids, mask):
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1)
        return torch.nn.functional.normalize(pooled.float(), dim=-1)

    ids, mask = batch(a.batch, a.tokens, a.device)
    where = torch.cuda.get_device_name(0) if a.device == "cuda" else a.device
    print("torch %s, transformers model %s on %s; batch %d x %d tokens, median of %d" % (
        torch.__version__, type(model).__name__, where, a.batch, a.tokens, a.rounds), flush=True)
    print("torch eager bf16 sdpa: %.0f embeddings/s" % rate(embed, ids, mask, a.rounds, 3),
          flush=True)
    t0 = time.perf_counter()
    compiled = torch.compile(embed, mode="reduce-overhead")
    for _ in range(5):  # compiles, then records the CUDA graph
        compiled(ids, mask)
    sync(a.device)
    took = time.perf_counter() - t0
    print("torch compile reduce-overhead bf16 sdpa: %.0f embeddings/s (compiled and warmed up "
          "in %.0f s)" % (rate(compiled, ids, mask, a.rounds, 0), took), flush=True)


if __name__ == "__main__":
    main()
