#!/usr/bin/env python3
"""memcheck.py — attnserve under valgrind memcheck: a short serving run and
every start-up failure path.

1. Serving: the server starts under memcheck (two threads, the smallest
   batch the model allows), answers one request of every kind the soak sends
   (tests/soak/soak.py: every route, every error status, clients that go away
   mid-body and while queued), and exits 0 on SIGTERM.
2. Start-up failures: a bad flag, bad values, a missing, malformed or
   contradicting config file, a missing, truncated or corrupt model, the port
   already in use, max_batch_tokens below the model's max_seq_length, an unreadable or
   empty api_key_file, ... each exits with its documented status and says
   why; --help, --version and --print-config exit 0.

Every run must end with no memory error (--error-exitcode=99, and the log's
ERROR SUMMARY must say 0) and with nothing in use at exit: not only no
definite or indirect leak, but no block still reachable either (a block
reachable from a static is a missing free all the same). Suppressions
(attnserve.supp) cover only third-party code, each entry with the reason;
today there are none.

valgrind 3.19 does not know AVX-512: its synthetic CPUID offers at most AVX2,
so the service's run-time choice (kernels/simd.c) and OpenBLAS's
(DYNAMIC_ARCH) both fall back to paths valgrind can execute. The serving run
records what each chose (the "serving" log line's cpu_simd, OpenBLAS's
"Core:" with OPENBLAS_VERBOSE=2) and fails if either is an AVX-512 path.

    memcheck.py --bin build/attnserve --out build/valgrind
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "soak"))
import soak  # noqa: E402  (the request mix, reused)

MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
SUPP = os.path.join(HERE, "attnserve.supp")
VALGRIND = ["valgrind", "--tool=memcheck", "--leak-check=full",
            "--show-leak-kinds=all", "--errors-for-leak-kinds=definite,indirect",
            "--error-exitcode=99", "--num-callers=40", "--suppressions=" + SUPP]
# A forward pass costs memcheck about a second per token on a shared machine
# (OpenBLAS's AVX2 GEMMs emulated): the texts embedded here are a few tokens
# each. Any request stays queued long enough under memcheck for its client
# to reset it there.
soak.TEXTS = ["Hi", "Yes", "No, thanks", "Héllo"]
soak.QUEUED_BODY = json.dumps({"input": "Hi"}).encode()
# Answers take memcheck's ~50x longer, more on a busy machine.
soak.TIMEOUT = 300
# The serving settings: small and quick under memcheck's ~50x slowdown. No
# engine plugin: with plugin_dir unset the service would load the ones beside
# the binary, and the cuda plugin brings the CUDA runtime and cuBLASLt
# (540 MB of third-party code, its own allocations at load) into a check
# of the service's memory.
SETTINGS = dict(soak.SETTINGS, threads=2, max_batch_tokens=512, max_batch_requests=8,
                max_queue=16, max_connections=16, connection_timeout_s=30,
                request_timeout_ms=300000, drain_timeout_s=300, backend="fused",
                plugin_dir="none")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_without_attnserve(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    env.update(extra or {})
    return env


def memcheck_problems(vg_log):
    """What memcheck's log says went wrong; [] when clean: no error, and not
    one byte in use at exit. The service frees everything it and its
    libraries hold on every exit path it takes on purpose, so anything left
    is a leak, whatever kind memcheck gives it (a block still reachable from
    a static is a missing free all the same)."""
    with open(vg_log) as f:
        text = f.read()
    m = re.findall(r"ERROR SUMMARY: (\d+) errors", text)
    if not m:
        return ["no ERROR SUMMARY in %s (valgrind did not finish)" % vg_log]
    problems = []
    if int(m[-1]) != 0:
        problems.append("memcheck: %s errors (see %s)" % (m[-1], vg_log))
    in_use = re.findall(r"in use at exit: ([\d,]+) bytes in ([\d,]+) blocks", text)
    if not in_use or in_use[-1][0] != "0":
        problems.append("%s bytes in %s blocks in use at exit, want none (see %s)"
                        % (in_use[-1] + (vg_log,) if in_use else ("?", "?", vg_log)))
    return problems


# ---- 1. serving ----------------------------------------------------------------------

class Ctx:
    """What soak's request functions expect of a client."""

    def __init__(self, port, seed):
        import random
        self.port, self.rng, self.s = port, random.Random(seed), requests.Session()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def post(self, path, body):
        return self.s.post(self.url(path), data=body, headers=soak.JSON, timeout=soak.TIMEOUT)


def wait_idle(port, timeout):
    """True once /metrics shows nothing queued or running."""
    end = time.time() + timeout
    while time.time() < end:
        text = requests.get("http://127.0.0.1:%d/metrics" % port, timeout=soak.TIMEOUT).text
        busy = [line for line in text.splitlines()
                if line.startswith(("attnserve_queue_depth ", "attnserve_batch_requests_in_flight "))
                and float(line.split()[1]) != 0]
        if not busy:
            return True
        time.sleep(1)
    return False


def serving(a):
    out = os.path.join(a.out, "serving")
    os.makedirs(out, exist_ok=True)
    port = free_port()
    cfg = os.path.join(out, "attnserve.json")
    with open(cfg, "w") as f:
        json.dump(dict(SETTINGS, port=port, model=MODEL), f)
    vg_log, log = os.path.join(out, "valgrind.log"), os.path.join(out, "server.log")
    problems = []
    with open(log, "w") as logf:
        proc = subprocess.Popen(VALGRIND + ["--log-file=" + vg_log, a.bin, "--config", cfg],
                                stdout=logf, stderr=subprocess.STDOUT,
                                env=env_without_attnserve({"OPENBLAS_VERBOSE": "2"}))
        try:
            t0 = time.time()
            while True:
                if proc.poll() is not None:
                    return ["serving: exited with %d at start; see %s" % (proc.returncode, log)]
                if time.time() - t0 > 300:
                    return ["serving: not ready after 300 s under valgrind"]
                try:
                    if requests.get("http://127.0.0.1:%d/ready" % port, timeout=5).ok:
                        break
                except requests.ConnectionError:
                    pass
                time.sleep(0.5)
            print("memcheck: serving: ready after %.0f s" % (time.time() - t0), flush=True)
            # Every kind once, two clients at a time so that batches hold more
            # than one request and the queue is used.
            ops = list(soak.OPS)
            failures = []

            def worker(k):
                c = Ctx(port, k)
                for name, _, _, _, fn in ops[k::2]:
                    try:
                        fn(c)
                    except Exception as e:  # noqa: BLE001 - reported below
                        failures.append("%s: %s: %s" % (name, type(e).__name__, e))
                c.s.close()
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            problems += ["serving: unexpected answer: " + f for f in failures]
            print("memcheck: serving: %d kinds of request answered after %.0f s"
                  % (len(ops), time.time() - t0), flush=True)
            # A request whose client reset it may still be queued or running
            # (a first batch takes over a minute under memcheck): SIGTERM once
            # the server is idle, so the drain never races the slowdown.
            if not wait_idle(port, 300):
                problems.append("serving: still busy 300 s after the last answer")
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if status != 0:
        problems.append("serving: exit status %s after SIGTERM (99: memcheck errors)" % status)
    problems += memcheck_problems(vg_log)
    with open(log) as f:
        text = f.read()
    cpu = re.search(r"cpu_simd=(\S+)", text)
    core = re.search(r"Core: (\S+)", text)
    print("memcheck: serving: under valgrind the service chose cpu_simd=%s; OpenBLAS Core: %s"
          % (cpu.group(1) if cpu else "?", core.group(1) if core else "?"))
    if not cpu or "avx512" in cpu.group(1):
        problems.append("serving: the service's SIMD path under valgrind: %s"
                        % (cpu.group(1) if cpu else "not logged"))
    if core and re.search(r"SkylakeX|Cooperlake|Sapphire", core.group(1)):
        problems.append("serving: OpenBLAS chose an AVX-512 kernel under valgrind: " + core.group(1))
    return problems


# ---- 2. start-up failures ----------------------------------------------------------------

def write(path, text, mode="w"):
    with open(path, mode) as f:
        f.write(text)
    return path


def model_copy(d, name, safetensors=None):
    """A model directory beside the real one: every file linked, the weights
    replaced by `safetensors` bytes when given."""
    m = os.path.join(d, name)
    os.makedirs(m, exist_ok=True)
    for f in os.listdir(MODEL):
        if f.startswith("."):
            continue
        src = os.path.join(MODEL, f)
        if f == "model.safetensors" and safetensors is not None:
            write(os.path.join(m, f), safetensors, "wb")
        else:
            os.symlink(src, os.path.join(m, f))
    return m


def startup_cases(d):
    """(name, argv after the binary, extra environment, expected exit status)."""
    # A free port: a case that got as far as listening would serve and hang
    # there, and its timeout would say so.
    base = {"host": "127.0.0.1", "port": free_port(), "threads": 2, "model": MODEL,
            "max_batch_tokens": 512, "plugin_dir": "none"}
    good = write(os.path.join(d, "good.json"), json.dumps(base))

    def cfg(name, **changes):
        settings = dict(base)
        settings.update(changes)
        return write(os.path.join(d, name + ".json"), json.dumps(settings))

    with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
        head = f.read(1 << 20)
    header_len = int.from_bytes(head[:8], "little")
    truncated = model_copy(d, "truncated", head)                     # header intact, data cut
    garbage = model_copy(d, "garbage", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    huge_header = model_copy(d, "huge_header", (1 << 62).to_bytes(8, "little") + b"{}")
    bad_offsets = model_copy(d, "bad_offsets", head[:8 + header_len].replace(
        b'"data_offsets":[0,', b'"data_offsets":[9,', 1))
    empty = model_copy(d, "empty", b"")
    no_tokenizer = os.path.join(d, "no_tokenizer")
    os.makedirs(no_tokenizer)
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(MODEL, f), os.path.join(no_tokenizer, f))
    bad_model_config = model_copy(d, "bad_model_config")
    os.remove(os.path.join(bad_model_config, "config.json"))
    write(os.path.join(bad_model_config, "config.json"), '{"hidden_size": "big"}')
    empty_keys = write(os.path.join(d, "empty_keys"), "# no keys here\n")
    keys = write(os.path.join(d, "keys"), "key-one\n")

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    busy_port = busy.getsockname()[1]

    c = "--config"
    # (name, arguments, environment, exit status, what the error must say)
    cases = [
        ("help", ["--help"], None, 0, "ATTNSERVE_"),
        ("version", ["--version"], None, 0, "attnserve"),
        ("print-config", [c, good, "--print-config"], None, 0, '"max_batch_tokens"'),
        ("unknown flag", [c, good, "--no-such-flag=1"], None, 2, "unknown flag"),
        ("bad flag value", [c, good, "--threads=many"], None, 2, '"threads"'),
        ("flag out of bounds", [c, good, "--max_queue=-1"], None, 2, '"max_queue"'),
        ("api key as a flag", [c, good, "--api_key=secret"], None, 2, "never from the command"),
        ("bad environment value", [c, good], {"ATTNSERVE_PORT": "http"}, 2, '"port"'),
        ("missing config file", [c, os.path.join(d, "nope.json")], None, 2,
         "No such file"),
        ("malformed config file", [c, write(os.path.join(d, "bad.json"), '{"port": 80')], None,
         2, "malformed JSON"),
        ("unknown config key", [c, cfg("unknown", no_such_setting=1)], None, 2,
         "no_such_setting"),
        ("config type error", [c, cfg("type", threads="two")], None, 2, '"threads"'),
        ("unknown backend", [c, cfg("backend", backend="warp")], None, 2, "warp"),
        ("missing model", [c, cfg("nomodel", model=os.path.join(d, "nope"))], None, 2,
         "cannot load"),
        ("model without tokenizer", [c, cfg("notok", model=no_tokenizer)], None, 2,
         "cannot load the tokenizer"),
        ("truncated weights", [c, cfg("trunc", model=truncated)], None, 2,
         "cannot load the model"),
        ("garbage weights header", [c, cfg("garbage", model=garbage)], None, 2,
         "cannot load the model"),
        ("absurd header length", [c, cfg("huge", model=huge_header)], None, 2,
         "cannot load the model"),
        ("weights offsets wrong", [c, cfg("offsets", model=bad_offsets)], None, 2,
         "cannot load the model"),
        ("empty weights file", [c, cfg("empty", model=empty)], None, 2,
         "cannot load the model"),
        ("bad model config.json", [c, cfg("mcfg", model=bad_model_config)], None, 2,
         "cannot load the model"),
        ("max_batch_tokens below max_seq_length", [c, cfg("mbt", max_batch_tokens=255)], None, 2,
         "below the model's max_seq_length"),
        ("missing api_key_file", [c, cfg("nokeys", api_key_file=os.path.join(d, "nope"))],
         None, 2, "api_key_file"),
        ("api_key_file is a directory", [c, cfg("dirkeys", api_key_file=d)], None, 2,
         "api_key_file"),
        ("api_key_file without keys", [c, cfg("emptykeys", api_key_file=empty_keys)], None, 2,
         "holds no keys"),
        ("empty API key in environment", [c, cfg("envkey", api_key_file=keys)],
         {"ATTNSERVE_API_KEY": " "}, 2, "ATTNSERVE_API_KEY"),
        ("port already in use", [c, cfg("busy", port=busy_port)], None, 1, "cannot listen"),
    ]
    return cases, busy


def startup_case(d, i, case, a):
    """Runs one start-up case under memcheck; returns (line to print, problems)."""
    name, args, env, want, text = case
    vg_log = os.path.join(d, "case%02d.valgrind.log" % i)
    log = os.path.join(d, "case%02d.log" % i)
    t0 = time.time()
    with open(log, "w") as logf:
        proc = subprocess.run(VALGRIND + ["--log-file=" + vg_log, a.bin] + args,
                              stdout=logf, stderr=subprocess.STDOUT,
                              env=env_without_attnserve(env), timeout=300)
    got = proc.returncode
    found = memcheck_problems(vg_log)
    if got != want and not (got == 99 and found):
        found.append("exit status %d, want %d (see %s)" % (got, want, log))
    with open(log) as f:
        said = f.read().strip().splitlines()
    if not any(text in line for line in said):
        found.append("its output does not say %r (see %s)" % (text, log))
    line = "memcheck: start-up: %-38s exit %d in %4.1f s  %s" % (
        name, got, time.time() - t0, "ok" if not found else "FAIL")
    if want != 0 and said:
        line += "\n           says: " + said[-1][:150]
    return line, ["start-up: %s: %s" % (name, p) for p in found]


def startup(a):
    d = os.path.join(a.out, "startup")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cases, busy = startup_cases(d)
    problems = []
    # Each case is its own valgrind process, and valgrind runs a program's
    # threads one at a time, so the cases go side by side, one per core; the
    # cases that read bad weights self-test every backend first and take a
    # minute each under memcheck. Lines are printed in the cases' order.
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            futures = [pool.submit(startup_case, d, i, case, a) for i, case in enumerate(cases)]
            for f in futures:
                line, found = f.result()
                print(line, flush=True)
                problems += found
    finally:
        busy.close()
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", choices=("serving", "startup"))
    a = p.parse_args()
    if not shutil.which("valgrind"):
        print("memcheck: valgrind is not installed; run scripts/install-deps.sh", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    problems = []
    if a.only != "startup":
        problems += serving(a)
    if a.only != "serving":
        problems += startup(a)
    for pr in problems:
        print("memcheck: FAIL: " + pr)
    print("memcheck: %s" % ("FAIL" if problems else "PASS"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
