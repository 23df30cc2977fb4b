#!/usr/bin/env python3
"""Scale benchmarks of the operator on the bundled local control plane (`make bench`).

Scenarios (each run on a fresh local control plane; medians of --runs):

many     1, 10 and 30 providers declared at once (the project's sample core provider and sample
         infrastructure providers, one namespace each; each infrastructure release a variant of
         the sample with its own API group and ClusterRole names, so no two providers install
         the same object): time to all Ready against the floor of `kubectl apply --server-side`
         of the same rendered objects until their Deployments are Available, and the operator's RSS.
churn    three providers installed, then 20,000 unrelated Secrets and 20,000 ConfigMaps in 200
         namespaces, then 60 s of 100 updates per second to them: the operator's RSS and CPU
         growth, the reconciles they trigger and the writes it makes.
large    releases 1x, 4x and 16x the size of the real v1.12.0 core release (its CRDs repeated under
         other API groups): render time and peak RSS of `capi-provider-operator render`, and the
         longest stall of the operator's event loop while it installs the largest one (served by
         the local GitHub-compatible server).
restart  with the 30 providers installed, the operator restarted: time from start to the first
         complete pass over every provider, the writes and release reads it makes; then two
         replicas with leader election, the leader stopped (SIGTERM: the lease is released) and
         killed (SIGKILL: the lease must expire): time until the standby leads.

Results go to a JSON file (--out, default ~/.cache/capi-provider-operator/bench/scale.json) that
e2e/bench/report.py turns into docs/performance.md and its plots.
Usage: scale.py [--runs N] [--scenarios many,restart,churn,large] [--out FILE]
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

from common import (BIN, ROOT, cert_manager_crds, commit, releases, shipped_env, TARGET, Cluster, all_there, run,
                    watches, without_inventory)

SAMPLES = os.path.join(ROOT, "examples", "sample-providers")
SIZES = [1, 10, 30]
WRITE = re.compile(r"http\.method=(?:PATCH|POST|PUT|DELETE)[^\n]*requesting")


class Operator:
    """The release build of the operator, logging every request (to count writes)."""

    def __init__(self, c: Cluster, name: str, *args: str):
        self.port = free_port()
        self.log_path = os.path.join(c.dir, f"{name}.log")
        log = open(self.log_path, "w")
        env = dict(os.environ, **shipped_env(), KUBECONFIG=c.kubeconfig, RUST_LOG="info,kube_client=debug", POD_NAME=name)
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
    # The aggregated ClusterRole too: with one name for all, the providers took turns rewriting
    # it (the peer scenario's audit log, 2026-11-26: 326 ClusterRole patches for 10 providers).
    return (text.replace("infrastructure.sample.", f"infrastructure.sample{i}.")
            .replace("sample-infra-manager-role", f"sample{i}-infra-manager-role")
            .replace("sample-infra-aggregated-manager-role", f"sample{i}-infra-aggregated-manager-role"))


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
    """Every provider Ready (untimed steps: `kubectl wait`)."""
    kinds = sorted({kind.lower() + "s" for kind, *_ in ps})
    c.k("wait", "--for=condition=Ready", f"--timeout={timeout}s", "-A", ",".join(kinds), "--all")


def kinds_of(ps) -> dict:
    """How many providers of each resource `ps` declares."""
    out: dict = {}
    for kind, *_ in ps:
        out[kind.lower() + "s"] = out.get(kind.lower() + "s", 0) + 1
    return out


def floor(n: int, ordered: bool = False) -> float:
    """kubectl apply --server-side of the rendered objects, then wait for the Deployments. With
    `ordered`, the core provider's objects first, until its Deployment is Available, then the
    rest: the order the operator keeps (and cluster-api-operator too)."""
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
        docs = [without_inventory(doc) for doc in docs]
        waves = [(docs[:1], ps[:1]), (docs[1:], ps[1:])] if ordered and n > 1 else [(docs, ps)]
        # Timed the way the operator's side is (see common.Watch).
        ws = watches(c, {"deployments": 0}, "Available")
        time.sleep(1)
        t0 = time.monotonic()
        applied = 0
        for wave_docs, wave in waves:
            c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(wave_docs))
            applied += len(wave)
            end = ws[0][0].wait(applied)
        ws[0][0].stop()
        return end - t0
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
        ws = watches(c, kinds_of(ps), "Ready")
        time.sleep(3)
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(provider_yaml(*p[:3]) for p in ps))
        elapsed = all_there(ws) - t0
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


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def churn(objects: int = 20000, namespaces: int = 200, seconds: int = 60, rate: int = 100) -> dict:
    """Background churn: unrelated Secrets and ConfigMaps created, then updated at `rate`/s."""
    ps = providers(3)
    c = Cluster()
    op = proxy = None
    try:
        prepare(c, ps)
        c.k("apply", "--server-side", "-f", "-", stdin="\n".join(configmap(*p) for p in ps))
        op = Operator(c, "operator")
        c.k("apply", "--server-side", "-f", "-", stdin="\n---\n".join(provider_yaml(*p[:3]) for p in ps))
        wait_ready(c, ps)
        port = free_port()
        proxy = subprocess.Popen([c.kubectl, "--kubeconfig", c.kubeconfig, "proxy", f"--port={port}"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        api = f"http://127.0.0.1:{port}"
        time.sleep(1)
        def call(method, path, body):
            req = urllib.request.Request(api + path, method=method, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/merge-patch+json" if method == "PATCH"
                                                  else "application/json"})
            urllib.request.urlopen(req, timeout=30).read()
        for n in range(namespaces):
            call("POST", "/api/v1/namespaces", {"metadata": {"name": f"churn-{n}"}})
        per = objects // namespaces
        t0 = time.monotonic()
        for n in range(namespaces):
            for i in range(per):
                meta = {"name": f"obj-{i}", "namespace": f"churn-{n}", "labels": {"app": "churn"}}
                call("POST", f"/api/v1/namespaces/churn-{n}/secrets", {"metadata": meta, "stringData": {"v": "0"}})
                call("POST", f"/api/v1/namespaces/churn-{n}/configmaps", {"metadata": meta, "data": {"v": "0"}})
        created_s = time.monotonic() - t0
        time.sleep(5)
        rss0, cpu0 = op.rss_mib(), cpu_seconds(op.p.pid)
        passes0, log0 = passes(op), len(op.log())
        t0 = time.monotonic()
        done = 0
        while time.monotonic() - t0 < seconds:
            kind = "secrets" if done % 2 == 0 else "configmaps"
            field = "stringData" if kind == "secrets" else "data"
            n, i = done % namespaces, (done // namespaces) % per
            call("PATCH", f"/api/v1/namespaces/churn-{n}/{kind}/obj-{i}", {field: {"v": str(done)}})
            done += 1
            ahead = done / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        time.sleep(2)
        return {"objects": 2 * per * namespaces, "namespaces": namespaces, "create_s": created_s,
                "updates": done, "update_rate": done / seconds,
                "rss_growth_mib": op.rss_mib() - rss0, "rss_mib": op.rss_mib(),
                "cpu_s": cpu_seconds(op.p.pid) - cpu0,
                "reconciles": passes(op) - passes0, "writes": op.writes(log0)}
    finally:
        if proxy:
            proxy.kill()
        if op:
            op.stop()
        c.down()


def large_release(factor: int, into: str) -> str:
    """The v1.12.0 core release with its CRDs repeated `factor` times under other API groups."""
    import yaml  # PyYAML: only this scenario needs it
    base = os.path.join(releases(), "cluster-api/v1.12.0")
    text = open(os.path.join(base, "core-components.yaml")).read()
    docs = [d for d in yaml.safe_load_all(text) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    out = list(docs)
    for k in range(1, factor):
        for crd in crds:
            copy = json.loads(json.dumps(crd))
            group = f"x{k}.{copy['spec']['group']}"
            copy["spec"]["group"] = group
            copy["metadata"]["name"] = f"{copy['spec']['names']['plural']}.{group}"
            copy["spec"].pop("conversion", None)
            out.append(copy)
    d = os.path.join(into, "cluster-api", f"v1.{factor}.0")
    os.makedirs(d, exist_ok=True)
    body = "\n---\n".join(yaml.safe_dump(o, sort_keys=False) for o in out)
    open(os.path.join(d, "core-components.yaml"), "w").write(body)
    open(os.path.join(d, "metadata.yaml"), "w").write(
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n"
        f"- major: 1\n  minor: {factor}\n  contract: v1beta2\n")
    return body


def large(runs: int) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as repo:
        for factor in (1, 4, 16):
            body = large_release(factor, repo)
            f = os.path.join(repo, f"core-{factor}.yaml")
            open(f, "w").write(provider_yaml("CoreProvider", "capi-system", "cluster-api", selector=False)
                               .replace("v0.2.0", f"v1.{factor}.0"))
            times, peaks = [], []
            for _ in range(runs):
                t0 = time.monotonic()
                p = subprocess.Popen([BIN, "render", "-f", f, "--repository", repo], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
                _, status, usage = os.wait4(p.pid, 0)
                times.append(time.monotonic() - t0)
                peaks.append(usage.ru_maxrss / 1024)
                if status != 0:
                    raise RuntimeError(f"render of the {factor}x release failed")
            rows.append({"factor": factor, "bytes": len(body), "render_s": statistics.median(times),
                         "peak_rss_mib": statistics.median(peaks)})
            print(f"large {factor}x: {rows[-1]}", file=sys.stderr)
        stall = install_stall(repo, 16)
    return {"releases": rows, "install_16x": stall}


def install_stall(repo: str, factor: int) -> dict:
    """The operator installs the `factor`x release from the local GitHub-compatible server."""
    fake = os.path.join(TARGET, "debug", "capi-fake-github")
    server = subprocess.Popen([fake, "--dir", repo, "--repo", "kubernetes-sigs/cluster-api=cluster-api"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    c = Cluster()
    op = None
    try:
        url = server.stdout.readline().strip() if server.stdout else ""
        c.k("apply", "--server-side", "-f", cert_manager_crds())
        ps = [("CoreProvider", "capi-system", "cluster-api", "", "")]
        prepare(c, ps)
        op = Operator(c, "operator", "--github-api-url", url)
        time.sleep(2)
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin=provider_yaml("CoreProvider", "capi-system", "cluster-api",
                                                                     selector=False).replace("v0.2.0", f"v1.{factor}.0"))
        wait_ready(c, ps)
        took = time.monotonic() - t0
        stall = op.counter("capi_operator_event_loop_stall_max_seconds")
        return {"factor": factor, "install_s": took, "max_stall_s": stall, "rss_mib": op.rss_mib()}
    finally:
        if op:
            op.stop()
        server.kill()
        c.down()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenarios", default="many,restart,churn,large")
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/capi-provider-operator/bench/scale.json"))
    a = ap.parse_args()
    wanted = a.scenarios.split(",")
    results = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
               f"{platform.system()} {platform.release()}", "runs": a.runs,
               "commits": {w: commit() for w in wanted}}
    if "many" in wanted:
        rows = []
        for n in SIZES:
            fl, ordered, op, rss = [], [], [], []
            for i in range(a.runs):
                fl.append(floor(n))
                ordered.append(floor(n, ordered=True) if n > 1 else fl[-1])
                t, r = operator_many(n)
                op.append(t)
                rss.append(r)
                print(f"many n={n} run {i + 1}: floor {fl[-1]:.2f}s ordered floor {ordered[-1]:.2f}s "
                      f"operator {t:.2f}s rss {r:.1f} MiB", file=sys.stderr)
            rows.append({"providers": n, "floor_s": statistics.median(fl),
                         "ordered_floor_s": statistics.median(ordered), "operator_s": statistics.median(op),
                         "rss_mib": statistics.median(rss)})
        results["many"] = rows
    if "restart" in wanted:
        results["restart"] = restart(a.runs)
        print(f"restart: {results['restart']}", file=sys.stderr)
    if "churn" in wanted:
        results["churn"] = churn()
        print(f"churn: {results['churn']}", file=sys.stderr)
    if "large" in wanted:
        results["large"] = large(a.runs)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    # Scenarios not run this time keep their earlier results, with the commit they measured.
    if os.path.exists(a.out):
        with open(a.out) as f:
            earlier = json.load(f)
        for w in ("many", "restart", "churn", "large"):
            if w not in wanted and w in earlier:
                results[w] = earlier[w]
                results["commits"][w] = earlier.get("commits", {}).get(w, "unknown")
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
