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
    checked = re.findall(r"max error (\S+), bound (\S+)\s+(ok|FAILED)", attn)
    worst = max((float(e) / float(b) for e, b, _ in checked if float(b) > 0), default=None)
    engine = read("engine.log")
    rows = [["unit tests cuda_*", status("unit"), synth.replace("Synthesis: ", "") or why("unit")],
            ["gpu-attn bounds", status("attention"),
             "%d/%d within bound%s" % (sum(1 for c in checked if c[2] == "ok"), len(checked),
                                      ", worst error/bound %.2f" % worst if worst is not None
                                      else "") if checked else why("attention")]]
    for p in ("fp32", "bf16"):
        m = re.search(r"^golden %s: lowest cosine vs cpu fp32 (\S+), vs PyTorch (\S+)(.*?), floor "
                      r"(\S+)\s+(ok|FAILED)" % p, engine, re.M)
        rows.append(["gpu-engine golden %s" % p, status("engine"),
                     "%s: cosine vs cpu fp32 %s (floor %s), vs PyTorch %s%s" % (
                         m.group(5), m.group(1), m.group(4), m.group(2), m.group(3))
                     if m else why("engine")])
    rows.append(["service engine=cuda", status("service"),
                 "; ".join(filter(None, [
                     find(r"^(status .*)$", read("service.log"), 1, ""),
                     find(r"(precision=\S+ min_cosine=\S+ floor=\S+)", read("service-check.txt"),
                          1, "")])) or why("service")])
    if "service-engine" in S:
        rows.append(["service answers from cuda", status("service-engine"), why("service-engine")])
    if "cudnn" in S:
        rows.append(["service gpu_attention=cudnn", status("cudnn"),
                     find(r"^(status .*)$", read("cudnn.log"), 1, "") or why("cudnn")])
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
    rows = [["attnserve cuda bf16 (engine)", cuda16], ["attnserve cuda fp32 (engine)", cuda32],
            ["attnserve cpu fp32 (engine, 16 threads)", cpu],
            ["PyTorch eager bf16 sdpa", eager], ["PyTorch torch.compile reduce-overhead", comp]]
    rows[0].append(why("engine"))
    rows[3].append(why("torch-embed"))
    table("embeddings/s, MiniLM, batch 128 x 64 tokens (median; engine %s, torch %s)"
          % (status("engine"), status("torch-embed")), ["who", "embeddings/s", ""], rows)


def attention():
    ours, backend = {}, "flash"
    for line in read("attention.log").splitlines():
        h = re.match(r"attention benchmark \((\w+)", line)
        if h:
            backend = h.group(1)
            continue
        m = re.match(r"(\d+x\d+)\s+(fp16|bf16)\s+d(\d+)\s+(?:(\w+)\s+)?[\d.]+\s+([\d.]+)\s*$", line)
        if m:
            ours[(m.group(1), m.group(2), m.group(3), m.group(4) or backend)] = m.group(5)
    torch = {}
    for line in read("sdpa.log").splitlines():
        m = re.match(r"(\d+x\d+)\s+(fp16|bf16)\s+d(\d+)\s+(\w+)\s+[\d.]+\s+([\d.]+)\s*$", line)
        if m:
            torch[(m.group(1), m.group(2), m.group(3), m.group(4))] = m.group(5)
    keys = list(dict.fromkeys(k[:3] for k in list(ours) + list(torch)))  # as first printed
    mine = sorted({k[3] for k in ours}, key=lambda b: (b != "flash", b))
    theirs = ["flash", "cudnn", "efficient"]
    header = ["shape", "type", "d"] + ["ours %s" % b for b in mine] + ["sdpa %s" % b for b in theirs]
    if "cudnn" not in mine:
        header.insert(3 + len(mine), "ours cudnn")
    rows = []
    for k in keys:
        r = list(k[:2]) + ["d" + k[2]] + [ours.get(k + (b,), "-") for b in mine]
        if "cudnn" not in mine:
            r.append("NOT RUN (not built)")
        rows.append(r + [torch.get(k + (b,), "-") for b in theirs])
    table("attention TFLOP/s (median of 20; ours %s, PyTorch %s)"
          % (status("attention"), status("sdpa")), header, rows or [["-"] * len(header)])
    for name in ("attention", "sdpa"):
        if not S.get(name, ("ok",))[0] == "ok":
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
