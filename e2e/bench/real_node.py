#!/usr/bin/env python3
"""The real node's start time (issue 31's target: node start to Ready within 20 s warm).

Starts a private cluster with `cluster-up.sh --real-node` RUNS times (default 5) and records, for
each, the time from the start of the node (real-node-up.sh: containerd, image import, kubelet,
kube-proxy) until its Node is Ready, and the whole cluster-up. Prints the runs and their medians,
writes them to ~/.cache/capi-provider-operator/bench/real-node.json and exits 1 when the median
node start exceeds the target. Needs root and the built node (`e2e/scripts/build.sh --node`).

Usage: real_node.py [--runs N] [--target-ms MS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "e2e", "scripts")
OUT = os.path.expanduser("~/.cache/capi-provider-operator/bench/real-node.json")


def one_run() -> tuple[int, int]:
    """(node start to Ready, whole cluster-up) in milliseconds."""
    d = tempfile.mktemp(prefix="capi-bench-real-node-")
    t0 = time.monotonic()
    try:
        up = subprocess.run([os.path.join(SCRIPTS, "cluster-up.sh"), "--dir", d, "--real-node"],
                            capture_output=True, text=True, check=True)
        total = int((time.monotonic() - t0) * 1000)
    finally:
        subprocess.run([os.path.join(SCRIPTS, "cluster-down.sh"), "--dir", d], capture_output=True)
    m = re.search(r"is Ready in (\d+) ms", up.stderr)
    if not m:
        raise SystemExit(f"no 'Ready in' line from real-node-up.sh:\n{up.stderr}")
    return int(m.group(1)), total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--target-ms", type=int, default=20000)
    a = p.parse_args()
    if os.geteuid() != 0:
        print("real_node.py: SKIPPED: the real node needs root", file=sys.stderr)
        return 0
    subprocess.run([os.path.join(SCRIPTS, "build.sh"), "--node"], check=True, stdout=subprocess.DEVNULL)
    runs = [one_run() for _ in range(a.runs)]
    node = statistics.median(r[0] for r in runs)
    up = statistics.median(r[1] for r in runs)
    for i, (n, t) in enumerate(runs, 1):
        print(f"run {i}: node start to Ready {n} ms, cluster-up {t} ms")
    print(f"median: node start to Ready {node:.0f} ms (target {a.target_ms} ms), cluster-up {up:.0f} ms")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"runs": [{"node_ready_ms": n, "cluster_up_ms": t} for n, t in runs],
                   "median_node_ready_ms": node, "median_cluster_up_ms": up, "target_ms": a.target_ms}, f)
    return 0 if node <= a.target_ms else 1


if __name__ == "__main__":
    sys.exit(main())
