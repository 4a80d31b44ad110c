"""summary.py RESULTS_DIR — the one table tests/gpu/run.sh prints last, read
from the files its steps wrote there (steps.tsv: name, status, seconds,
note; one NAME.log per step): correctness, then embeddings/s of the engine
against PyTorch, attention TFLOP/s of our kernels against PyTorch's SDPA
backends, and the service's embeddings/s over HTTP. A figure a step did not
produce shows as "-"; a step's status says why. Standard library only."""
import os
import re
import sys

D = sys.argv[1] if len(sys.argv) > 1 else "."


def read(name):
    try:
        with open(os.path.join(D, name), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def steps():
    out = {}
    for line in read("steps.tsv").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            out[parts[0]] = (parts[1], parts[2], parts[3] if len(parts) > 3 else "")
    return out


S = steps()


def status(name):
    """The step's status and time, short: "ok (12s)", "FAILED (40s)", "NOT RUN"."""
    st, secs, _ = S.get(name, ("NOT RUN", "", ""))
    return "%s%s" % (st, " (%ss)" % secs if secs and st != "NOT RUN" else "")


def why(name):
    """What the step said beside its status (why it failed or did not run);
    for a service that failed, its last error line."""
    note = S.get(name, ("", "", "the step did not start"))[2]
    errors = re.findall(r" ERROR +(.*)$", read(name + "-server.log"), re.M)
    return "%s: %s" % (note, errors[-1]) if errors and S.get(name, ("",))[0] == "FAILED" else note


def find(pattern, text, group=1, default="-"):
    m = re.search(pattern, text, re.M)
    return m.group(group) if m else default


def row(cells, widths):
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()


def table(title, header, rows):
    print("\n" + title)
    rows = [list(r) + [""] * (len(header) - len(r)) for r in rows]
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print(row(header, widths))
    print(row(["-" * w for w in widths], widths))
    for r in rows:
        print(row(r, widths))


def correctness():
    unit = read("unit.log")
    synth = find(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)",
                 unit, 0, "")
    attn = read("attention.log")
    checked = re.findall(r"^(\w+)\s+(?:fp16|bf16)\s+d\d+\s+case.*max error (\S+), bound (\S+)\s+(ok|FAILED)",
                         attn, re.M)
    worst = max((float(e) / float(b) for _, e, b, _ in checked if float(b) > 0), default=None)
    per_kernel = {}
    for k, _, _, verdict in checked:
        n_ok, n = per_kernel.get(k, (0, 0))
        per_kernel[k] = (n_ok + (verdict == "ok"), n + 1)
    kernels = ", ".join("%s %d/%d" % (k, v[0], v[1]) for k, v in per_kernel.items())
    engine = read("engine.log")
    rows = [["unit tests cuda_*", status("unit"), synth.replace("Synthesis: ", "") or why("unit")],
            ["gpu-attn bounds", status("attention"),
             "within bound: %s%s%s" % (kernels, "; worst error/bound %.2f" % worst
                                       if worst is not None else "",
                                       "; " + why("attention") if why("attention") else "")
             if checked else why("attention")]]
    for p in ("fp32", "bf16", "fp16", "tf32"):
        m = re.search(r"^golden %s: lowest cosine vs cpu fp32 (\S+), vs PyTorch (\S+)(.*?), floor "
                      r"(\S+)\s+(ok|FAILED)" % p, engine, re.M)
        rows.append(["gpu-engine golden %s" % p, status("engine"),
                     "%s: cosine vs cpu fp32 %s (floor %s), vs PyTorch %s%s" % (
                         m.group(5), m.group(1), m.group(4), m.group(2), m.group(3))
                     if m else why("engine")])
    tasks = re.findall(r"^task (\S+) (fp32|bf16|fp16|tf32): .*\s(ok|FAILED)$", engine, re.M)
    rows.append(["gpu-engine task models", status("engine"),
                 "%d/%d within bounds vs cpu fp32%s" % (
                     sum(v == "ok" for _, _, v in tasks), len(tasks),
                     "".join("; %s %s FAILED" % (m, p) for m, p, v in tasks if v != "ok"))
                 if tasks else find(r"^(task models: NOT RUN.*)$", engine, 1, why("engine"))])
    rows.append(["service engine=cuda", status("service"),
                 "; ".join(filter(None, [
                     find(r"^(status .*)$", read("service.log"), 1, ""),
                     find(r"GPU attention kernel .*?(kernel=\S+)", read("service.log"), 1, ""),
                     find(r"(precision=\S+ min_cosine=\S+ floor=\S+)", read("service-check.txt"),
                          1, "")])) or why("service")])
    if "service-engine" in S:
        rows.append(["service answers from cuda", status("service-engine"), why("service-engine")])
    if "cudnn" in S:
        rows.append(["service gpu_attention=cudnn", status("cudnn"),
                     "; ".join(filter(None, [
                         find(r"^(status .*)$", read("cudnn.log"), 1, ""),
                         find(r"GPU attention kernel .*?(kernel=\S+ .*)$", read("cudnn.log"), 1,
                              "")])) or why("cudnn")])
    else:
        rows.append(["cudnn", "NOT RUN (not built)", ""])
    table("correctness", ["check", "status", "what it found"], rows)


def throughput():
    e = read("engine.log")
    t = read("torch-embed.log")
    m = re.search(r"cuda fp32 (\d+), cuda bf16 (\d+), cpu fp32 \((\d+) threads\) (\d+)", e)
    cuda32, cuda16, cpu = (m.group(1), m.group(2), m.group(4)) if m else ("-", "-", "-")
    eager = find(r"torch eager bf16 sdpa: (\d+)", t)
    comp = find(r"torch compile reduce-overhead bf16 sdpa: (\d+)", t)
    half = find(r"cuda fp16 (\d+), cuda tf32 \d+", e)
    tf32 = find(r"cuda fp16 \d+, cuda tf32 (\d+)", e)
    rows = [["attnserve cuda bf16 (engine)", cuda16], ["attnserve cuda fp16 (engine)", half],
            ["attnserve cuda fp32 (engine)", cuda32], ["attnserve cuda tf32 (engine)", tf32],
            ["attnserve cpu fp32 (engine, 16 threads)", cpu],
            ["PyTorch eager bf16 sdpa", eager], ["PyTorch torch.compile reduce-overhead", comp]]
    rows[0].append(why("engine"))
    rows[5].append(why("torch-embed"))
    table("embeddings/s, MiniLM, batch 128 x 64 tokens (median; engine %s, torch %s)"
          % (status("engine"), status("torch-embed")), ["who", "embeddings/s", ""], rows)


def attention():
    # gpu-attn: one row per shape and type, milliseconds and TFLOP/s of
    # flash, flash2 and cudnn ("-" where cudnn did not run), then ratios.
    ours = {}
    for line in read("attention.log").splitlines():
        m = re.match(r"(\d+x\d+)\s+(fp16|bf16)\s+d(\d+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)"
                     r"\s+\S+\s+(\S+)", line)
        if m:
            key = (m.group(1), m.group(2), m.group(3))
            ours[key + ("flash",)] = m.group(4)
            ours[key + ("flash2",)] = m.group(5)
            if m.group(6) != "-":
                ours[key + ("cudnn",)] = m.group(6)
    torch = {}
    for line in read("sdpa.log").splitlines():
        m = re.match(r"(\d+x\d+)\s+(fp16|bf16)\s+d(\d+)\s+(\w+)\s+[\d.]+\s+([\d.]+)\s*$", line)
        if m:
            torch[(m.group(1), m.group(2), m.group(3), m.group(4))] = m.group(5)
    keys = list(dict.fromkeys(k[:3] for k in list(ours) + list(torch)))  # as first printed
    mine = ["flash", "flash2", "cudnn"]
    theirs = ["flash", "cudnn", "efficient"]
    header = ["shape", "type", "d"] + ["ours %s" % b for b in mine] + ["sdpa %s" % b for b in theirs]
    rows = []
    for k in keys:
        cudnn = ours.get(k + ("cudnn",), "NOT RUN" if k + ("flash",) in ours else "-")
        rows.append(list(k[:2]) + ["d" + k[2], ours.get(k + ("flash",), "-"),
                                   ours.get(k + ("flash2",), "-"), cudnn] +
                    [torch.get(k + (b,), "-") for b in theirs])
    table("attention TFLOP/s (median of 20; ours %s, PyTorch %s; ours cudnn is cuDNN's SDPA "
          "called by the engine's plugin, sdpa cudnn the same through PyTorch)"
          % (status("attention"), status("sdpa")), header, rows or [["-"] * len(header)])
    for name in ("attention", "sdpa"):
        if why(name):
            print("%s: %s %s" % (name, S.get(name, ("NOT RUN",))[0], why(name)))


def http():
    rows = []
    for name in ("http-float", "http-base64", "http-cudnn-float"):
        if name in S or read(name + ".log"):
            rows.append([name, find(r"(\d+) embeddings/s", read(name + ".log")),
                         find(r"embeddings/s \((.*)\)", read(name + ".log"), 1, "") or why(name),
                         status(name)])
    table("HTTP /v1/embeddings, engine=cuda bf16 (the whole service)",
          ["load", "embeddings/s", "how", "status"], rows or [["-", "-", why("service"), "-"]])


def main():
    gpu = read("gpu.txt").strip().splitlines()
    print("==== summary: %s" % (gpu[0] if gpu else "no GPU"))
    correctness()
    throughput()
    attention()
    http()
    print("\nsteps: " + ", ".join("%s %s" % (k, v[0]) for k, v in S.items()))
    print("results and logs: %s" % os.path.abspath(D))


if __name__ == "__main__":
    main()
