"""What the benchmarks share: paths, the release build of the operator and fresh local control planes."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "e2e", "scripts")
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/capi-provider-operator/target"))
BIN = os.path.join(TARGET, "release", "capi-provider-operator")


def commit() -> str:
    """The commit the benchmark measures (with "+changes" when the tree differs from it)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def shipped_env() -> dict:
    """The literal environment variables the operator's Deployment sets (manifests/operator), so
    the benchmarks measure the operator as it is shipped (its allocator settings included)."""
    with open(os.path.join(ROOT, "manifests", "operator", "deployment.yaml")) as f:
        text = f.read()
    return dict(re.findall(r"^\s*- name: (\w+)\n\s*value: (\S+)\s*$", text, flags=re.M))


INVENTORY_API = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3"


def without_inventory(rendered: str) -> str:
    """`render` output without clusterctl's inventory entry: the operator creates that entry's CRD
    at startup, kubectl has no way to, so the `kubectl apply` floor applies the release alone."""
    return "---\n".join(part for part in re.split(r"^---\n", rendered, flags=re.M) if INVENTORY_API not in part)


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


class Cluster:
    """A fresh local control plane (e2e/scripts/cluster-up.sh) in a directory of its own."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="capi-bench-")
        os.rmdir(self.dir)
        self.kubeconfig = run(os.path.join(SCRIPTS, "cluster-up.sh"), "--dir", self.dir).strip()
        self.kubectl = os.path.join(run(os.path.join(SCRIPTS, "build.sh")).strip(), "kubectl")

    def k(self, *args, stdin=None):
        p = subprocess.run([self.kubectl, "--kubeconfig", self.kubeconfig, *args],
                           capture_output=True, text=True, input=stdin)
        if p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} failed: {p.stderr.strip()[-2000:]}")
        return p.stdout

    def down(self):
        subprocess.run([os.path.join(SCRIPTS, "cluster-down.sh"), "--dir", self.dir], capture_output=True)
