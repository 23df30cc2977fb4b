#!/usr/bin/env python3
"""Scale benchmarks of the operator on the bundled local control plane (`make bench`).

Scenarios (each run on a fresh local control plane; medians of --runs):

many     1, 10 and 30 providers declared at once (the project's sample core provider and sample
         infrastructure providers, one namespace each; each infrastructure release a variant of
         the sample with its own API group and ClusterRole names, so no two providers install
         the same object): time to all Ready against the floor of `kubectl apply --server-side`
         of the same rendered objects plus waiting for the Deployments, and the operator's RSS.
restart  with the 30 providers installed, the operator restarted: time from start to the first
         complete pass over every provider, the writes and release reads it makes; then two
         replicas with leader election, the leader stopped (SIGTERM: the lease is released) and
         killed (SIGKILL: the lease must expire): time until the standby leads.

Results go to a JSON file (--out, default ~/.cache/capi-provider-operator/bench/scale.json) that
e2e/bench/report.py turns into docs/performance.md and its plots.
Usage: scale.py [--runs N] [--scenarios many,restart] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from common import BIN, ROOT, Cluster, run

SAMPLES = os.path.join(ROOT, "examples", "sample-providers")
SIZES = [1, 10, 30]
INVENTORY_API = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3"
WRITE = re.compile(r"http\.method=(?:PATCH|POST|PUT|DELETE)[^\n]*requesting")


class Operator:
    """The release build of the operator, logging every request (to count writes)."""

    def __init__(self, c: Cluster, name: str, *args: str):
        self.port = free_port()
        self.log_path = os.path.join(c.dir, f"{name}.log")
        log = open(self.log_path, "w")
        env = dict(os.environ, KUBECONFIG=c.kubeconfig, RUST_LOG="info,kube_client=debug", POD_NAME=name)
        self.p = subprocess.Popen([BIN, "run", "--metrics-bind-address", f"127.0.0.1:{self.port}", *args],
                                  stdout=log, stderr=log, env=env)
        self.started = time.monotonic()

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def writes(self, since: int = 0) -> int:
        return len(WRITE.findall(self.log()[since:]))

    def metrics(self) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                return r.read().decode()
        except OSError:
            return ""

    def counter(self, prefix: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.metrics().splitlines()
                   if line.startswith(prefix))

    def rss_mib(self) -> float:
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            self.p.wait(timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def variant(i: int) -> str:
    """The sample infrastructure release with its own API group and ClusterRole names."""
    text = open(os.path.join(SAMPLES, "sample-infrastructure", "v0.2.0", "infrastructure-components.yaml")).read()
    return (text.replace("infrastructure.sample.", f"infrastructure.sample{i}.")
            .replace("sample-infra-manager-role", f"sample{i}-infra-manager-role"))


def providers(n: int):
    """(kind, namespace, name, components text, metadata text) of the core and n-1 infra providers."""
    core = ("CoreProvider", "capi-system", "cluster-api",
            open(os.path.join(SAMPLES, "sample-core", "v0.2.0", "core-components.yaml")).read(),
            open(os.path.join(SAMPLES, "sample-core", "v0.2.0", "metadata.yaml")).read())
    meta = open(os.path.join(SAMPLES, "sample-infrastructure", "v0.2.0", "metadata.yaml")).read()
    return [core] + [("InfrastructureProvider", f"infra-{i}", f"sample{i}", variant(i), meta) for i in range(1, n)]


def configmap(kind, ns, name, components, metadata) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": f"{name}-v0.2.0", "namespace": ns,
                                    "labels": {"bench": name, "provider.cluster.x-k8s.io/version": "v0.2.0"}},
                       "data": {"metadata": metadata, "components": components}})


def provider_yaml(kind, ns, name, selector=True) -> str:
    spec = "  version: v0.2.0\n"
    if selector:
        spec += f"  fetchConfig:\n    selector:\n      matchLabels:\n        bench: {name}\n"
    return (f"apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n"
            f"  name: {name}\n  namespace: {ns}\nspec:\n{spec}")


def prepare(c: Cluster, ps, with_crds=True):
    c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}) for _, ns, *_ in ps))
    if with_crds:
        crds = os.path.join(ROOT, "manifests/crds")
        c.k("apply", "--server-side", "-f", crds)
        c.k("wait", "--for", "condition=Established", "--timeout", "60s", "-f", crds)


def wait_ready(c: Cluster, ps, timeout=600):
    deadline = time.monotonic() + timeout
    want = {(kind, ns, name) for kind, ns, name, *_ in ps}
    while time.monotonic() < deadline:
        out = c.k("get", "capi-providers", "-A", "-o",
                  "jsonpath={range .items[*]}{.kind} {.metadata.namespace} {.metadata.name} "
                  "{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}")
        ready = {tuple(line.split()[:3]) for line in out.splitlines() if line.endswith(" True")}
        if want <= ready:
            return
        time.sleep(0.2)
    raise RuntimeError(f"not all Ready within {timeout}s")


def floor(n: int) -> float:
    """kubectl apply --server-side of the rendered objects, then wait for the Deployments."""
    ps = providers(n)
    c = Cluster()
    try:
        prepare(c, ps, with_crds=False)
        docs = []
        with tempfile.TemporaryDirectory() as repo:
            for kind, ns, name, comp, meta in ps:
                label = "cluster-api" if kind == "CoreProvider" else f"infrastructure-{name}"
                d = os.path.join(repo, label, "v0.2.0")
                os.makedirs(d)
                file = "core-components.yaml" if kind == "CoreProvider" else "infrastructure-components.yaml"
                open(os.path.join(d, file), "w").write(comp)
                open(os.path.join(d, "metadata.yaml"), "w").write(meta)
                f = os.path.join(repo, f"{name}.yaml")
                open(f, "w").write(provider_yaml(kind, ns, name, selector=False))
                docs.append(run(BIN, "render", "-f", f, "--repository", repo))
        # The operator's render prints clusterctl's inventory entry too, whose CRD kubectl has no way
        # to create first; the floor is the release objects alone.
        docs = ["---\n".join(part for part in re.split(r"^---\n", doc, flags=re.M)
                              if INVENTORY_API not in part) for doc in docs]
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(docs))
        for _, ns, *_ in ps:
            c.k("wait", "--for=condition=Available", "--timeout=600s", "-n", ns, "deployment", "--all")
        return time.monotonic() - t0
    finally:
        c.down()


def operator_many(n: int, keep=False):
    ps = providers(n)
    c = Cluster()
    op = None
    try:
        prepare(c, ps)
        c.k("apply", "--server-side", "-f", "-", stdin="\n".join(configmap(*p) for p in ps))
        op = Operator(c, "operator")
        time.sleep(3)
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(provider_yaml(*p[:3]) for p in ps))
        wait_ready(c, ps)
        elapsed = time.monotonic() - t0
        time.sleep(2)
        rss = op.rss_mib()
        if keep:
            return c, op, ps, elapsed, rss
        return elapsed, rss
    finally:
        if not keep:
            if op:
                op.stop()
            c.down()


def passes(op: Operator) -> float:
    return op.counter("capi_operator_reconcile_total{")


def restart(runs: int) -> dict:
    c, op, ps, _, _ = operator_many(30, keep=True)
    try:
        op.stop(signal.SIGTERM)
        first, writes, reads = [], [], []
        for _ in range(runs):
            op = Operator(c, "operator")
            deadline = time.monotonic() + 120
            while passes(op) < len(ps) and time.monotonic() < deadline:
                time.sleep(0.05)
            first.append(time.monotonic() - op.started)
            time.sleep(5)
            writes.append(op.writes())
            reads.append(op.counter("capi_operator_fetch_duration_seconds_count"))
            op.stop(signal.SIGTERM)
        takeover = {}
        for how, sig in (("SIGTERM", signal.SIGTERM), ("SIGKILL", signal.SIGKILL)):
            a = Operator(c, "replica-a", "--leader-elect", "--leader-election-namespace", "default")
            time.sleep(4)
            b = Operator(c, "replica-b", "--leader-elect", "--leader-election-namespace", "default")
            time.sleep(4)
            leader, standby = (a, b) if passes(a) > 0 else (b, a)
            t0 = time.monotonic()
            leader.stop(sig)
            while passes(standby) < len(ps) and time.monotonic() - t0 < 60:
                time.sleep(0.05)
            takeover[how] = time.monotonic() - t0
            standby.stop(signal.SIGTERM)
        return {"providers": len(ps), "first_pass_s": statistics.median(first),
                "writes": max(writes), "release_reads": max(reads), "takeover_s": takeover}
    finally:
        c.down()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenarios", default="many,restart")
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/capi-provider-operator/bench/scale.json"))
    a = ap.parse_args()
    wanted = a.scenarios.split(",")
    results = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
               f"{platform.system()} {platform.release()}", "runs": a.runs}
    if "many" in wanted:
        rows = []
        for n in SIZES:
            fl, op, rss = [], [], []
            for i in range(a.runs):
                fl.append(floor(n))
                t, r = operator_many(n)
                op.append(t)
                rss.append(r)
                print(f"many n={n} run {i + 1}: floor {fl[-1]:.2f}s operator {t:.2f}s rss {r:.1f} MiB", file=sys.stderr)
            rows.append({"providers": n, "floor_s": statistics.median(fl), "operator_s": statistics.median(op),
                         "rss_mib": statistics.median(rss)})
        results["many"] = rows
    if "restart" in wanted:
        results["restart"] = restart(a.runs)
        print(f"restart: {results['restart']}", file=sys.stderr)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
