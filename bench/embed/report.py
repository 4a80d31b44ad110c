#!/usr/bin/env python3
"""report.py — the tables and chart of make bench-embed.

Reads the JSON lines of bench_embed (attnserve, one engine per precision) and
peers.py (timings and accuracy), and prints in Markdown, all from one run:
inputs/s of every engine per input length and batch size; the accuracy of
every engine (lowest and mean cosine of each input's embedding against fp32
sentence-transformers); and the ratios the targets are stated in, each marked
met or not met:

- attnserve fp32 >= 1.1x the best fp32 peer (ONNX Runtime, OpenVINO f32, PyTorch);
- attnserve bf16 >= 1.2x OpenVINO bf16, with a lowest cosine >= 0.9999;
- attnserve int8 >= 1.0x ONNX Runtime dynamic int8, with a lowest cosine >= 0.99.

A cell meets a target only when the throughput ratio and the accuracy floor
both hold (the floor is checked on that cell's input length).

Records after a {"kind": "round", "round": N} line belong to round N of
their cell (run.sh's ROUNDS; one round when there are no such lines). With
several rounds, a cell's throughput is the median of its rounds' and its
ratio the median of the rounds' ratios, each round's engines having run back
to back, with the lowest and highest round beside it. With --chart,
also writes a grouped bar chart (matplotlib if importable, else gnuplot if
installed, else no chart, said so).

Rerank rows (bench_embed --pairs, peers.py --rerank) get their own tables:
pairs/s per document length and documents per query; the largest and mean
|logit difference| of every engine against CrossEncoder fp32; and the same
three ratios, without the embedding targets' marks (those are stated for
embeddings).

    report.py [--chart PNG] [--note TEXT] [--backend fused] attnserve.jsonl [peers.jsonl]
        [accuracy.jsonl]
"""
import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ENGINES = [("attnserve-fp32", "attnserve fp32"), ("attnserve-bf16", "attnserve bf16"),
           ("attnserve-int8", "attnserve int8"), ("onnxruntime", "ORT fp32"),
           ("openvino", "OpenVINO fp32"), ("pytorch", "PyTorch fp32"),
           ("openvino-bf16", "OpenVINO bf16"), ("onnxruntime-int8", "ORT int8 (dynamic)")]
FP32_PEERS = ["onnxruntime", "openvino", "pytorch"]
# (attnserve engine, its peer or None for the best fp32 peer, ratio, lowest-cosine floor)
TARGETS = [("attnserve-fp32", None, 1.1, None),
           ("attnserve-bf16", "openvino-bf16", 1.2, 0.9999),
           ("attnserve-int8", "onnxruntime-int8", 1.0, 0.99)]


# The attention backend whose rows are attnserve's engines (--backend): fused,
# or naive for a model fused refuses (sliding windows, grouped K/V heads).
PRIMARY = ["fused"]


def engine_key(r):
    """attnserve's rows are named by precision (and backend when not the
    primary one)."""
    if "precision" in r and r["backend"] not in dict(ENGINES) and r["backend"] != "attnserve":
        b = "" if r["backend"] == PRIMARY[0] else r["backend"] + "-"
        return f"attnserve-{b}{r['precision']}"
    if r["backend"] == "attnserve":
        return f"attnserve-{r['precision']}"
    return r["backend"]


class Cases(dict):
    """(engine, tokens, batch) -> the cell's record, its inputs_per_s the
    median over rounds; .rounds[key] -> {round: record}."""

    def __init__(self, rounds):
        super().__init__()
        self.rounds = rounds
        for key, by_round in rounds.items():
            first = by_round[min(by_round)]
            self[key] = dict(first, inputs_per_s=statistics.median(
                r["inputs_per_s"] for r in by_round.values()), rounds=len(by_round))

    def nrounds(self):
        return max((len(v) for v in self.rounds.values()), default=0)


def load(paths):
    rounds, acc, meta = {}, {}, []
    for path in paths:
        if not os.path.exists(path):
            continue
        rnd = 1
        for line in open(path):
            # bench_embed says "precision X: skipped: ..." in plain text.
            if not line.startswith("{"):
                if line.strip():
                    meta.append({"kind": "text", "text": line.strip()})
                continue
            r = json.loads(line)
            if r.get("kind") == "round":
                rnd = r["round"]
            elif r.get("kind") == "case":
                # Both sides print inputs/s to one decimal; at a few
                # inputs/s (a 2048-token input, Qwen3's 128 x 4) that
                # rounding moves a ratio by up to a fifth, so it is taken
                # again from the median milliseconds (three decimals).
                if r.get("ms") and r.get("batch"):
                    r["inputs_per_s"] = r["batch"] * 1e3 / r["ms"]
                rounds.setdefault((engine_key(r), r["tokens_per_input"], r["batch"]), {})[rnd] = r
            elif r.get("kind") == "accuracy":
                acc[(engine_key(r), r["tokens_per_input"])] = r
            else:
                meta.append(r)
    return Cases(rounds), acc, meta


def fmt(v):
    if v is None:
        return "–"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def present(cases, acc):
    have = {k[0] for k in cases} | {k[0] for k in acc}
    return [(e, n) for e, n in ENGINES if e in have]


def header(meta):
    peaks = [m for m in meta if m.get("kind") == "peak"]
    if peaks:
        wall = [m["peak_gflops"] for m in peaks]
        print(f"- FP32 FMA peak ({peaks[0]['simd']}, {peaks[0]['threads']} threads), measured "
              f"{len(peaks)} times, before each cell: {min(wall):.1f} to {max(wall):.1f} GFLOP/s")
    for line in dict.fromkeys(f"- {m['backend']}: {m['version']}" for m in meta
                              if m.get("kind") == "peer"):
        print(line)
    for line in dict.fromkeys(f"- attnserve: {m['text']}" for m in meta
                              if m.get("kind") == "text"):
        print(line)
    print()


def of_rounds(cases):
    n = cases.nrounds()
    return f", then of {n} rounds" if n > 1 else ""


def throughput_table(cases, engines, lengths, batches, names):
    print(f"Inputs/s (median of the reps{of_rounds(cases)}; tokenization included for every "
          "engine):")
    print()
    print("| input | batch | " + " | ".join(n for _, n in engines) + " |")
    print("|---|---:|" + "---:|" * len(engines))
    for t in lengths:
        for b in batches:
            print(f"| {names[t]} ({t}) | {b} | " +
                  " | ".join(fmt(cases[(e, t, b)]["inputs_per_s"]) if (e, t, b) in cases
                             else "–" for e, _ in engines) + " |")
    print()


def accuracy_table(acc, engines, lengths, names):
    if not acc:
        print("No accuracy figures (they need the peers' fp32 sentence-transformers).")
        print()
        return
    n = max(r["n"] for r in acc.values())
    print(f"Accuracy: lowest / mean cosine against fp32 sentence-transformers over the {n} "
          "inputs of each length, each engine:")
    print()
    print("| input | " + " | ".join(n for _, n in engines) + " |")
    print("|---|" + "---:|" * len(engines))
    for t in lengths:
        cells = []
        for e, _ in engines:
            r = acc.get((e, t))
            if r is None and e == "pytorch":
                cells.append("(the reference)")
                continue
            cells.append("–" if r is None else
                         f"{r['min_cosine']:.6f} / {r['mean_cosine']:.6f}")
        print(f"| {names[t]} ({t}) | " + " | ".join(cells) + " |")
    print()


def round_ratios(cases, eng, peer, t, b):
    """[(ratio, peer name or None)] of each round in which eng and its peer
    (the round's best fp32 peer when peer is None) both ran."""
    mine = cases.rounds.get((eng, t, b), {})
    # The fp32 peers of the cell: a round where one of them is missing (its
    # run failed) would be measured against a lesser best, so it is left out.
    ran = [p for p in FP32_PEERS if (p, t, b) in cases.rounds]
    out = []
    for rnd, r in sorted(mine.items()):
        if peer is None:
            if not ran or any(rnd not in cases.rounds[(p, t, b)] for p in ran):
                continue
            theirs, pname = max((cases.rounds[(p, t, b)][rnd]["inputs_per_s"], p) for p in ran)
        else:
            got = cases.rounds.get((peer, t, b), {}).get(rnd)
            theirs, pname = (got["inputs_per_s"] if got else None), None
        if theirs:
            out.append((r["inputs_per_s"] / theirs, pname))
    return out


def ratio_cell(cases, acc, eng, peer, need, floor, t, b):
    """Returns (text, met or None when unmeasured, ratio): the median of the
    rounds' ratios, so that one slow spell on either side moves it little."""
    got = round_ratios(cases, eng, peer, t, b)
    if not got:
        return "–", None, None
    r = statistics.median(g[0] for g in got)
    # The peer that was the best most often, named beside the ratio.
    pname = collections.Counter(g[1] for g in got).most_common(1)[0][0]
    ok = r >= need
    cos = acc.get((eng, t))
    why = ""
    if floor is not None:
        if cos is None:
            ok, why = None, ", cosine not measured"
        elif cos["min_cosine"] < floor:
            ok, why = False, f", cosine {cos['min_cosine']:.5f} < {floor}"
    label = {True: "met", False: "NOT met", None: "?"}[ok]
    vs = f" vs {dict(ENGINES)[pname]}" if pname else ""
    # Two decimals unless they would round a miss up to the target.
    shown = f"{r:.3f}" if r < need and round(r, 2) >= need else f"{r:.2f}"
    spread = ""
    if len(got) > 1:
        spread = f" [{min(g[0] for g in got):.2f}–{max(g[0] for g in got):.2f}]"
    if len(got) < cases.nrounds():
        spread += f" ({len(got)} of {cases.nrounds()} rounds)"
    return f"{shown}×{vs}{spread} ({label}{why})", ok, r


def targets_table(cases, acc, lengths, batches, names):
    n = cases.nrounds()
    print("Targets (one ratio per cell, from the same run):" if n <= 1 else
          f"Targets (each cell the median of its {n} rounds' ratios, the engines of a round run "
          "back to back; the rounds' lowest and highest in brackets):")
    print()
    print("| input | batch | fp32 / best fp32 peer (≥ 1.1×) | bf16 / OpenVINO bf16 "
          "(≥ 1.2×, cos ≥ 0.9999) | int8 / ORT int8 (≥ 1.0×, cos ≥ 0.99) |")
    print("|---|---:|---|---|---|")
    summary = {eng: [] for eng, *_ in TARGETS}
    for t in lengths:
        for b in batches:
            cells = []
            for eng, peer, need, floor in TARGETS:
                text, ok, r = ratio_cell(cases, acc, eng, peer, need, floor, t, b)
                cells.append(text)
                if r is not None:
                    summary[eng].append((ok, r, t, b))
            print(f"| {names[t]} ({t}) | {b} | " + " | ".join(cells) + " |")
    print()
    for eng, peer, need, floor in TARGETS:
        got = summary[eng]
        if not got:
            print(f"- {eng}: not measured")
            continue
        met = sum(1 for ok, *_ in got if ok)
        lo = min(got, key=lambda g: g[1])
        hi = max(got, key=lambda g: g[1])
        vs = dict(ENGINES)[peer] if peer else "the best fp32 peer"
        print(f"- {eng} / {vs} ≥ {need}×"
              + (f", lowest cosine ≥ {floor}" if floor else "")
              + f": met in {met} of {len(got)} cells; ratio {lo[1]:.2f}× ({lo[2]} tokens × "
              f"{lo[3]}) to {hi[1]:.2f}× ({hi[2]} × {hi[3]})")
    print()


def rerank_tables(cases, acc, engines, lengths, batches):
    pair = {k[1]: r["pair_tokens"] for k, r in cases.items() if "pair_tokens" in r}
    query = next((r["query_tokens"] for r in cases.values() if "query_tokens" in r), "?")

    def doc(t):
        return f"{t} tokens" + (f" (pair {pair[t]})" if t in pair else "")

    print(f"Pairs/s: one {query}-token query with each of the documents, one call per query "
          "(median of the reps; tokenizing the pairs included for every engine):")
    print()
    print("| document | documents per query | " + " | ".join(n for _, n in engines) + " |")
    print("|---|---:|" + "---:|" * len(engines))
    for t in lengths:
        for b in batches:
            print(f"| {doc(t)} | {b} | " +
                  " | ".join(fmt(cases[(e, t, b)]["inputs_per_s"]) if (e, t, b) in cases
                             else "–" for e, _ in engines) + " |")
    print()
    if acc:
        n = max(r["n"] for r in acc.values())
        spread = {t: r["ref_std"] for (e, t), r in acc.items() if "ref_std" in r}
        print(f"Accuracy: largest / mean |logit difference| against CrossEncoder fp32 over the {n} "
              "pairs of each length (the reference's logits have standard deviation "
              + ", ".join(f"{spread[t]:.3f} at {t}" for t in lengths if t in spread) + "):")
        print()
        print("| document | " + " | ".join(n for _, n in engines) + " |")
        print("|---|" + "---:|" * len(engines))
        for t in lengths:
            cells = []
            for e, _ in engines:
                r = acc.get((e, t))
                cells.append("(the reference)" if r is None and e == "pytorch" else "–" if r is None
                             else f"{r['max_abs_diff']:.2g} / {r['mean_abs_diff']:.2g}")
            print(f"| {doc(t)} | " + " | ".join(cells) + " |")
        print()
    else:
        print("No accuracy figures (they need the peers' CrossEncoder).")
        print()
    print("Ratios (from the same run):")
    print()
    print("| document | documents per query | fp32 / best fp32 peer | bf16 / OpenVINO bf16 "
          "| int8 / ORT int8 |")
    print("|---|---:|---|---|---|")
    for t in lengths:
        for b in batches:
            cells = []
            for eng, peer, *_ in TARGETS:
                text, _, _ = ratio_cell(cases, {}, eng, peer, 0.0, None, t, b)
                cells.append(text.split(" (")[0])
            print(f"| {doc(t)} | {b} | " + " | ".join(cells) + " |")
    print()


def axes_of(cases):
    lengths = sorted({k[1] for k in cases})
    batches = sorted({k[2] for k in cases})
    names = {k[1]: r["input"] for k, r in cases.items()}
    return lengths, batches, names


def chart_matplotlib(cases, acc, path, note):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths, batches, names = axes_of(cases)
    engines = [(e, n) for e, n in present(cases, acc) if any(k[0] == e for k in cases)]
    fig, axes = plt.subplots(1, len(lengths), figsize=(5.5 * len(lengths), 5), squeeze=False)
    width = 0.8 / len(engines)
    colors = plt.get_cmap("tab10").colors
    for ax, t in zip(axes[0], lengths):
        for i, (e, label) in enumerate(engines):
            ys = [cases[(e, t, b)]["inputs_per_s"] if (e, t, b) in cases else 0 for b in batches]
            xs = [j + (i - (len(engines) - 1) / 2) * width for j in range(len(batches))]
            a = acc.get((e, t))
            if a:
                label = f"{label} (min cos {a['min_cosine']:.5f})"
            ax.bar(xs, ys, width, label=label, color=colors[i % len(colors)],
                   hatch="//" if e.startswith("attnserve") else None, edgecolor="white")
        ax.set_xticks(range(len(batches)))
        ax.set_xticklabels([str(b) for b in batches])
        ax.set_xlabel("batch size (inputs)")
        ax.set_yscale("log")
        ax.set_title(f"{names[t]} inputs ({t} tokens)")
        ax.grid(axis="y", alpha=0.3, which="both")
        ax.legend(fontsize=6.5, loc="lower right")
    axes[0][0].set_ylabel("inputs/s, log scale (higher is better)")
    fig.suptitle("all-MiniLM-L6-v2 embeddings, in-process throughput, every engine in one run"
                 + (f"\n{note}" if note else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def chart_gnuplot(cases, acc, path, note):
    lengths, batches, names = axes_of(cases)
    engines = [(e, n) for e, n in present(cases, acc) if any(k[0] == e for k in cases)]
    with tempfile.TemporaryDirectory() as d:
        plots = []
        for t in lengths:
            data = os.path.join(d, f"{t}.dat")
            with open(data, "w") as f:
                for b in batches:
                    f.write(f"{b} " + " ".join(str(cases[(e, t, b)]["inputs_per_s"])
                                               if (e, t, b) in cases else "0"
                                               for e, _ in engines) + "\n")
            cols = ", ".join(f"'{data}' using {i + 2}:xtic(1) title '{n}'"
                             for i, (_, n) in enumerate(engines))
            plots.append(f"set title '{names[t]} inputs ({t} tokens)'; plot {cols}")
        script = (f"set terminal pngcairo size {550 * len(lengths)},500; set output '{path}';"
                  "set style data histograms; set style fill solid; set key top left;"
                  "set logscale y; set ylabel 'inputs/s'; set xlabel 'batch size';"
                  f"set multiplot layout 1,{len(lengths)} title '{note}';" +
                  ";".join(plots) + "; unset multiplot")
        subprocess.run(["gnuplot", "-e", script], check=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--chart")
    p.add_argument("--note", default="")
    p.add_argument("--backend", default="fused",
                   help="the attention backend whose rows are attnserve's (default fused)")
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    PRIMARY[0] = a.backend
    cases, acc, meta = load(a.files)
    if not cases:
        print("no results", file=sys.stderr)
        return 1
    if a.note:
        print(f"- {a.note}")
    header(meta)
    lengths, batches, names = axes_of(cases)
    engines = present(cases, acc)
    if any(r.get("task") == "rerank" for r in cases.values()):
        rerank_tables(cases, acc, engines, lengths, batches)
        return 0
    throughput_table(cases, engines, lengths, batches, names)
    accuracy_table(acc, engines, lengths, names)
    targets_table(cases, acc, lengths, batches, names)
    if a.chart:
        try:
            chart_matplotlib(cases, acc, a.chart, a.note)
        except ImportError:
            if not shutil.which("gnuplot"):
                print("no chart: neither matplotlib nor gnuplot is installed", file=sys.stderr)
                return 0
            chart_gnuplot(cases, acc, a.chart, a.note)
        print(f"chart: {a.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
