"""prep.py — the inputs of bench/frontend/run.sh.

  prep.py body N ENCODING          a /v1/embeddings request of N medium-length
                                   sentences (about 20 to 40 tokens each for
                                   all-MiniLM-L6-v2, mean 28), all different,
                                   encoding_format ENCODING (float, base64)
  prep.py haproxy PORT STATS SERVER  deploy/haproxy.cfg with loopback binds
                                   and one server line, 127.0.0.1:SERVER

The sentences come from a fixed word list and seed, so every run posts the
same bodies."""
import json
import os
import random
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORDS = ("the service reads every request body once and writes its answer from the vectors "
         "that the engine returns while connections wait in the queue for a batch of inputs "
         "tokenizer splits words into pieces from a vocabulary learned on large text corpora "
         "measured throughput latency memory cores threads workers codec parser json base64 "
         "embeddings sentence model river mountain library morning evening quickly slowly "
         "because although however therefore meanwhile beautiful ordinary unexpected").split()


def sentences(n, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(15, 25))]
        words[0] = words[0].capitalize()
        out.append("%s, %d %s." % (" ".join(words[:6]), i, " ".join(words[6:])))
    return out


def body(n, encoding):
    return json.dumps({"input": sentences(n), "model": "all-MiniLM-L6-v2",
                       "encoding_format": encoding})


def haproxy(port, stats_port, server_port):
    """The shipped config with loopback binds and our one server, as
    tests/cluster rewrites it."""
    with open(os.path.join(ROOT, "deploy", "haproxy.cfg")) as f:
        text = f.read()
    out, section, servers_done = [], None, False
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^(global|defaults|frontend|backend|listen|resolvers)\b\s*(\S*)", line)
        if m:
            section = (m.group(1), m.group(2))
        if section == ("frontend", "attnserve") and s.startswith("bind "):
            line = "    bind 127.0.0.1:%d" % port
        elif section == ("frontend", "stats") and s.startswith("bind "):
            line = "    bind 127.0.0.1:%d" % stats_port
        elif section == ("backend", "attnserve") and s.startswith("server "):
            if servers_done:
                continue
            servers_done = True
            line = "    server attnserve1 127.0.0.1:%d" % server_port
        out.append(line)
    if not servers_done:
        sys.exit("prep: deploy/haproxy.cfg has no server lines in backend attnserve")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) == 3 and argv[0] == "body":
        print(body(int(argv[1]), argv[2]))
    elif len(argv) == 4 and argv[0] == "haproxy":
        sys.stdout.write(haproxy(*(int(a) for a in argv[1:])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
