#!/usr/bin/env python3
"""The release memory budget under load: three providers (core, kubeadm bootstrap, kubeadm
control plane) installed at the 1x release, then all three upgraded at once to releases 16 times
its size (scale.py's `large` releases, one variant per provider so no two install the same
object), served by the local GitHub-compatible server. Reports the operator's peak RSS (VmHWM)
over the upgrade, for each --release-memory-mib given (the chart's 256 Mi limit gives 192;
"auto" leaves the flag out, so the budget comes from the memory limit). With --cgroup-mib, the
operator runs in a cgroup v1 memory group of that limit (a child of this process's own), as in a
Pod: a run that exceeds it is OOM-killed, which the result says.

Usage: budget.py [--bin OPERATOR] [--budgets 192,100000] [--cgroup-mib 256]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from common import TARGET, Cluster, cert_manager_crds
import scale
from scale import Operator, large_release, prepare

PROVIDERS = [
    ("CoreProvider", "capi-system", "cluster-api", "core-components.yaml", ""),
    ("BootstrapProvider", "capi-kubeadm-bootstrap-system", "kubeadm", "bootstrap-components.yaml", "b"),
    ("ControlPlaneProvider", "capi-kubeadm-control-plane-system", "kubeadm", "control-plane-components.yaml", "c"),
]


def releases(repo: str) -> int:
    """v1.1.0 and v1.16.0 of the three providers; the 16x release's size in bytes."""
    size = 0
    for factor in (1, 16):
        body = large_release(factor, repo)
        size = len(body)
        d = os.path.join(repo, "cluster-api", f"v1.{factor}.0")
        for _, _, _, file, tag in PROVIDERS[1:]:
            # Its own namespace, object names and API groups.
            text = (body.replace("capi-", f"capi{tag}-").replace("cluster.x-k8s.io", f"{tag}.cluster.x-k8s.io"))
            open(os.path.join(d, file), "w").write(text)
    return size


def providers_yaml(version: str) -> str:
    return "\n---\n".join(
        f"apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n"
        f"  namespace: {ns}\nspec:\n  version: {version}\n" for kind, ns, name, *_ in PROVIDERS)


def installed(c: Cluster, version: str, op: Operator, timeout: float = 900) -> bool:
    """Whether all three providers reached `version` before the operator died."""
    deadline = time.monotonic() + timeout
    for kind, ns, name, *_ in PROVIDERS:
        while True:
            if op.p.poll() is not None:
                return False
            try:
                c.k("wait", f"--for=jsonpath={{.status.installedVersion}}={version}", "--timeout=5s",
                    "-n", ns, f"{kind.lower()}s/{name}")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
    return True


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cgroup(limit_mib: int) -> str:
    """A cgroup v1 memory group limited to `limit_mib`, under this process's own; its path."""
    own = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
               if line.split(":")[1] == "memory")
    path = f"/sys/fs/cgroup/memory{own.rstrip('/')}/capi-budget-{os.getpid()}"
    os.makedirs(path, exist_ok=True)
    open(os.path.join(path, "memory.limit_in_bytes"), "w").write(str(limit_mib * 1024 * 1024))
    return path


def wrapper(binary: str, group: str) -> str:
    """A script that joins `group` and runs the operator (so it starts inside the limit)."""
    fd, path = tempfile.mkstemp(suffix=".sh")
    os.write(fd, f"#!/bin/sh\necho $$ > {group}/cgroup.procs\nexec {binary} \"$@\"\n".encode())
    os.close(fd)
    os.chmod(path, 0o755)
    return path


def measure(binary: str, repo: str, budget: str, group: str | None) -> dict:
    fake = os.path.join(TARGET, "debug", "capi-fake-github")
    server = subprocess.Popen([fake, "--dir", repo, "--repo", "kubernetes-sigs/cluster-api=cluster-api"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    c = Cluster()
    op = None
    try:
        url = server.stdout.readline().strip() if server.stdout else ""
        c.k("apply", "--server-side", "-f", cert_manager_crds())
        prepare(c, [(k, ns, n) for k, ns, n, *_ in PROVIDERS])
        scale.BIN = wrapper(binary, group) if group else binary
        flag = [] if budget == "auto" else ["--release-memory-mib", budget]
        op = Operator(c, f"operator-{budget}", "--github-api-url", url, *flag)
        c.k("apply", "--server-side", "-f", "-", stdin=providers_yaml("v1.1.0"))
        if not installed(c, "v1.1.0", op):
            return {"budget_mib": budget, "killed_at": "1x install", "exit": op.p.returncode}
        before = status_kib(op.p.pid, "VmHWM") / 1024
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin=providers_yaml("v1.16.0"))
        if not installed(c, "v1.16.0", op):
            return {"budget_mib": budget, "killed_during_upgrade": True, "exit": op.p.returncode,
                    "after_s": round(time.monotonic() - t0, 1)}
        took = time.monotonic() - t0
        chosen = [line for line in op.log().splitlines() if "release memory budget" in line][:1]
        return {"budget_mib": budget, "budget_log": chosen[0][-40:] if chosen else "",
                "peak_before_upgrade_mib": round(before, 1),
                "peak_rss_mib": round(status_kib(op.p.pid, "VmHWM") / 1024, 1),
                "rss_after_mib": round(status_kib(op.p.pid, "VmRSS") / 1024, 1), "upgrade_s": round(took, 1)}
    finally:
        if op:
            op.stop()
        server.kill()
        c.down()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(TARGET, "release", "capi-provider-operator"))
    ap.add_argument("--budgets", default="192,100000")
    ap.add_argument("--cgroup-mib", type=int, default=0)
    a = ap.parse_args()
    rows = []
    group = cgroup(a.cgroup_mib) if a.cgroup_mib else None
    try:
        with tempfile.TemporaryDirectory() as repo:
            size = releases(repo)
            for b in a.budgets.split(","):
                rows.append(measure(a.bin, repo, b, group))
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        if group:
            os.rmdir(group)
    print(json.dumps({"release_16x_bytes": size, "cgroup_mib": a.cgroup_mib, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
