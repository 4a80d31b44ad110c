"""report.py CELLS.jsonl — the table of make bench-frontend (bench/frontend/run.sh).

Each cell (engine, codec workers, answer encoding, inputs per request, direct
or through haproxy) was run once per round, rounds interleaved. A round's
reading is wrk's request count and duration, and the server's /proc/PID/stat
and its count of answers before and after the timed window, both taken with
the server idle; the server's own CPU time (utime + stime) divided by the
embeddings it answered in between is the CPU per embedding, which a load generator on
the same cores does not blur the way a throughput figure is blurred. A cell
is the median of its rounds, with their range. Then the targets, met or
missed with the margin. A report, never a test: nothing here fails the run.

Records (one JSON object a line): {"kind": "run", ...} the machine and the
command; {"kind": "cell", ...} one round of one cell, "status" "ok" or why it
did not run ("n/a (setting absent)"); {"kind": "end", ...} the load after."""
import json
import statistics
import sys

# The front end's targets, service CPU per embedding at 32 inputs a request.
TARGET_US = {"float": 50.0, "base64": 25.0}
TARGET_BATCH = 32
# Two codec workers may cost at most this much CPU per embedding over one.
TARGET_WORKERS_RATIO = 1.10


def stat_cpu_ticks(stat_line):
    """utime + stime, in clock ticks, of one /proc/PID/stat line. The command
    name (field 2) is in parentheses and may hold spaces or parentheses
    itself, so the fields are counted from the last ')': state is field 3,
    utime 14 and stime 15."""
    rest = stat_line[stat_line.rindex(")") + 1:].split()
    return int(rest[11]) + int(rest[12])


def cpu_us_per_embedding(stat_before, stat_after, clk_tck, embeddings):
    """The service's CPU time between two /proc/PID/stat readings, in
    microseconds per embedding answered between them."""
    ticks = stat_cpu_ticks(stat_after) - stat_cpu_ticks(stat_before)
    if ticks < 0:
        raise ValueError("CPU time went backwards: two different processes?")
    return ticks * 1e6 / clk_tck / embeddings


def median_range(values):
    """(median, lowest, highest)."""
    return statistics.median(values), min(values), max(values)


def fmt_cell(values, digits):
    if not values:
        return "-"
    med, lo, hi = median_range(values)
    return "%.*f (%.*f–%.*f)" % (digits, med, digits, lo, digits, hi)


def readings(rec):
    """(embeddings/s, CPU µs per embedding) of one ok round: the throughput
    wrk saw, and the CPU time over the answers the server counted between
    its two readings (which include the last batch, finished after wrk
    stopped)."""
    return (rec["requests"] * rec["batch"] / rec["seconds"],
            cpu_us_per_embedding(rec["stat_before"], rec["stat_after"], rec["clk_tck"],
                                 rec["answered"] * rec["batch"]))


def cell_key(rec):
    return (rec["engine"], str(rec["workers"]), rec["encoding"], int(rec["batch"]), rec["via"])


def collect(records):
    """{cell key: {"status": ..., "eps": [...], "cpu_us": [...], "bad": n}} in
    first-seen order; a cell is ok only when every round of it was."""
    cells = {}
    for rec in records:
        if rec.get("kind") != "cell":
            continue
        c = cells.setdefault(cell_key(rec), {"status": "ok", "eps": [], "cpu_us": [], "bad": 0})
        if rec["status"] != "ok":
            c["status"] = rec["status"]
            continue
        if rec["requests"] <= 0 or rec["answered"] <= 0:  # a window too short for the engine
            c["status"] = "no answer within a round's window"
            continue
        eps, us = readings(rec)
        c["eps"].append(eps)
        c["cpu_us"].append(us)
        c["bad"] += rec.get("non2xx", 0)
    return cells


def verdict(measured, limit, unit, digits=2):
    """'met'/'missed' with the margin against an upper limit."""
    margin = limit - measured
    word = "met" if margin >= 0 else "missed"
    return "%s by %.*f%s (%.1f%%)" % (word, digits, abs(margin), unit,
                                     100 * abs(margin) / limit)


def targets(cells):
    """(target, cell, measured, verdict) rows."""
    rows = []
    for key, c in cells.items():
        engine, workers, enc, batch, via = key
        if engine != "instant" or batch != TARGET_BATCH or enc not in TARGET_US:
            continue
        name = "%s ≤ %g µs/embedding" % (enc, TARGET_US[enc])
        where = "codec_workers %s, %s" % (workers, via)
        if c["status"] != "ok" or not c["cpu_us"]:
            rows.append((name, where, "-", c["status"]))
            continue
        med = statistics.median(c["cpu_us"])
        rows.append((name, where, "%.2f µs" % med, verdict(med, TARGET_US[enc], " µs")))
    for key, c in cells.items():
        engine, workers, enc, batch, via = key
        if engine != "instant" or workers != "2":
            continue
        one = cells.get((engine, "1", enc, batch, via))
        name = "2 workers ≤ %.2f× 1 worker" % TARGET_WORKERS_RATIO
        where = "%s, %d inputs, %s" % (enc, batch, via)
        if c["status"] != "ok" or not one or one["status"] != "ok":
            rows.append((name, where, "-", c["status"] if c["status"] != "ok" else
                         (one["status"] if one else "n/a (no 1-worker cell)")))
            continue
        ratio = statistics.median(c["cpu_us"]) / statistics.median(one["cpu_us"])
        rows.append((name, where, "%.3f×" % ratio, verdict(ratio, TARGET_WORKERS_RATIO, "×", 3)))
    return rows


def render(records):
    run = next((r for r in records if r.get("kind") == "run"), {})
    end = next((r for r in records if r.get("kind") == "end"), {})
    cells = collect(records)
    out = []
    out.append("date: %s" % run.get("date", "?"))
    out.append("command: %s" % run.get("command", "?"))
    out.append("cpu: %s, %s cores; load average before %s, after %s" % (
        run.get("cpu", "?"), run.get("cores", "?"), run.get("loadavg_before", "?"),
        end.get("loadavg_after", "?")))
    out.append("haproxy: %s; codec_workers setting: %s" % (
        run.get("haproxy", "?"), "present" if run.get("codec_workers") else
        "absent in this binary (its cells read n/a)"))
    out.append("%s rounds of %s a cell, cells interleaved; %s connections; median (range) of "
               "the rounds" % (run.get("rounds", "?"), run.get("duration", "?"),
                               run.get("connections", "?")))
    out.append("")
    out.append("| engine | codec workers | answer | inputs/request | via | embeddings/s "
               "| service CPU µs/embedding | non-2xx |")
    out.append("|---|---|---|---:|---|---:|---:|---:|")
    for (engine, workers, enc, batch, via), c in cells.items():
        if c["status"] != "ok":
            out.append("| %s | %s | %s | %d | %s | %s | %s | |" % (
                engine, workers, enc, batch, via, c["status"], c["status"]))
            continue
        out.append("| %s | %s | %s | %d | %s | %s | %s | %d |" % (
            engine, workers, enc, batch, via, fmt_cell(c["eps"], 0), fmt_cell(c["cpu_us"], 1),
            c["bad"]))
    out.append("")
    out.append("| target | cell | measured (median) | verdict |")
    out.append("|---|---|---:|---|")
    for row in targets(cells):
        out.append("| %s | %s | %s | %s |" % row)
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: report.py CELLS.jsonl")
    with open(argv[0]) as f:
        records = [json.loads(line) for line in f if line.strip()]
    sys.stdout.write(render(records))


if __name__ == "__main__":
    main(sys.argv[1:])
