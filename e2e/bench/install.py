#!/usr/bin/env python3
"""Install benchmark of the operator on the bundled local control plane.

Measures, with the real Cluster API v1.12.0 core, kubeadm bootstrap and kubeadm control-plane
releases (as e2e/scripts/build-providers.sh assembles them):

1. time from creating the three provider objects to all Ready (releases pre-loaded in
   ConfigMaps), as a ratio to applying the same rendered objects with
   `kubectl apply --server-side` and waiting for the Deployments to be Available;
2. write requests the operator sends to the apiserver while everything is installed and
   nothing changes (counted from the operator's own HTTP client trace), over IDLE seconds;
3. the operator's resident memory (VmRSS) at the end.

Each side runs on its own fresh cluster. The figures also go to a JSON file (--out) that
e2e/bench/report.py puts into docs/performance.md.
Usage: install.py [--runs N] [--idle SECONDS] [--out FILE]
"""

import argparse
import base64
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from common import (BIN, ROOT, cert_manager_crds, commit, releases, shipped_env, Cluster, all_there, run, watches,
                    without_inventory)

PROVIDERS = [
    ("CoreProvider", "capi-system", "cluster-api", "cluster-api", "core-components.yaml"),
    ("BootstrapProvider", "capi-kubeadm-bootstrap-system", "kubeadm", "bootstrap-kubeadm", "bootstrap-components.yaml"),
    ("ControlPlaneProvider", "capi-kubeadm-control-plane-system", "kubeadm", "control-plane-kubeadm", "control-plane-components.yaml"),
]
VERSION = "v1.12.0"
# Extra `run` flags, to measure a configuration other than the shipped one (e.g.
# BENCH_OPERATOR_ARGS=--served-groups=management.cluster.x-k8s.io).
OPERATOR_ARGS = os.environ.get("BENCH_OPERATOR_ARGS", "").split()


def provider_yaml(kind, ns, name, selector=True):
    spec = f"  version: {VERSION}\n"
    if selector:
        spec += f"  fetchConfig:\n    selector:\n      matchLabels:\n        bench: {name}-{kind.lower()}\n"
    return (f"apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n"
            f"  name: {name}\n  namespace: {ns}\nspec:\n{spec}")


def base(c):
    c.k("apply", "--server-side", "-f", cert_manager_crds())
    for _, ns, *_ in PROVIDERS:
        c.k("create", "namespace", ns)


def baseline(repo):
    c = Cluster()
    try:
        base(c)
        rendered = []
        for kind, ns, name, label, _ in PROVIDERS:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(provider_yaml(kind, ns, name, selector=False))
            rendered.append(without_inventory(run(BIN, "render", "-f", f.name, "--repository", repo)))
        # Timed the way the operator's side is (see common.Watch).
        ws = watches(c, {"deployments": len(PROVIDERS)}, "Available")
        time.sleep(1)
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(rendered))
        return all_there(ws, 300) - t0
    finally:
        c.down()


def configmap(ns, kind, name, label, file, repo):
    meta = open(os.path.join(repo, label, VERSION, "metadata.yaml")).read()
    comp = open(os.path.join(repo, label, VERSION, file)).read()
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": f"{label}-{VERSION}", "namespace": ns,
                       "labels": {"bench": f"{name}-{kind.lower()}", "provider.cluster.x-k8s.io/version": VERSION},
                       "annotations": {}},
          "data": {"metadata": meta}}
    if len(meta) + len(comp) > 1024 * 1024:
        cm["binaryData"] = {"components": base64.b64encode(gzip.compress(comp.encode())).decode()}
        cm["metadata"]["annotations"]["provider.cluster.x-k8s.io/compressed"] = "true"
    else:
        cm["data"]["components"] = comp
    return json.dumps(cm)


def rss_of(pid) -> float:
    """VmRSS of a process in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def operator_run(repo, idle):
    c = Cluster()
    op = None
    try:
        base(c)
        c.k("apply", "--server-side", "-f", os.path.join(ROOT, "manifests/crds"))
        c.k("wait", "--for", "condition=Established", "--timeout", "60s", "-f", os.path.join(ROOT, "manifests/crds"))
        for kind, ns, name, label, file in PROVIDERS:
            c.k("apply", "--server-side", "-f", "-", stdin=configmap(ns, kind, name, label, file, repo))
        log = open(os.path.join(c.dir, "operator.log"), "w")
        env = dict(os.environ, **shipped_env(), KUBECONFIG=c.kubeconfig, RUST_LOG="info,kube_client=debug")
        op = subprocess.Popen([BIN, "run", *OPERATOR_ARGS], stdout=log, stderr=log, env=env)
        ws = watches(c, {kind.lower() + "s": 1 for kind, *_ in PROVIDERS}, "Ready")
        time.sleep(3)
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(provider_yaml(*p[:3]) for p in PROVIDERS))
        elapsed = all_there(ws, 300) - t0
        writes = None
        samples = []
        if idle > 0:
            time.sleep(5)  # let the last status write land before counting
            before = os.path.getsize(log.name)
            # RSS over the idle period too: the figure at the end depends on when glibc last
            # returned memory, the samples show where it settles.
            end = time.monotonic() + idle
            while time.monotonic() < end:
                time.sleep(min(5, max(0, end - time.monotonic())))
                samples.append(rss_of(op.pid))
            with open(log.name) as f:
                f.seek(before)
                tail = f.read()
            writes = len(re.findall(r"http\.method=(?:PATCH|POST|PUT|DELETE)[^\n]*requesting", tail))
        return elapsed, writes, rss_of(op.pid), samples
    finally:
        if op:
            op.kill()
        c.down()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", type=int, default=300)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/capi-provider-operator/bench/install.json"))
    a = ap.parse_args()
    repo = releases()
    base_times, op_times = [], []
    writes = rss = None
    idle_rss = []
    for i in range(a.runs):
        base_times.append(baseline(repo))
        last = i == a.runs - 1
        t, w, r, samples = operator_run(repo, a.idle if last else 0)
        op_times.append(t)
        if last:
            writes, rss, idle_rss = w, r, samples
        print(f"run {i + 1}: kubectl apply + wait {base_times[-1]:.2f}s, operator {t:.2f}s", file=sys.stderr)
    b, o = statistics.median(base_times), statistics.median(op_times)
    print(f"install (3 real v1.12.0 providers): operator {o:.2f}s, kubectl apply --server-side {b:.2f}s, "
          f"ratio {o / b:.2f} (goal <= 1.3; median of {a.runs})")
    print(f"idle writes by the operator over {a.idle}s: {writes} (goal 0)")
    print(f"operator RSS: {rss:.1f} MiB at the end (goal <= 40)", end="")
    if idle_rss:
        print(f"; over the idle period median {statistics.median(idle_rss):.1f}, "
              f"{min(idle_rss):.1f} to {max(idle_rss):.1f} MiB ({len(idle_rss)} samples)", end="")
    print()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "commit": commit(), "runs": a.runs, "operator_s": o, "kubectl_s": b,
                   "idle_s": a.idle, "idle_writes": writes, "rss_mib": rss,
                   "idle_rss_mib": idle_rss}, f, indent=2)


if __name__ == "__main__":
    main()
