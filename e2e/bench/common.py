"""What the benchmarks share: paths, the release build of the operator and fresh local control planes."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

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



@functools.cache
def providers_dir() -> str:
    """What e2e/scripts/build-providers.sh builds (a no-op once built): the Cluster API releases it
    assembles from each module's own config/ (releases/<provider>/<version>/, the published
    v1.12.0 byte for byte) and cert-manager's manifest. Exits with the reason when it cannot."""
    try:
        images = run(os.path.join(SCRIPTS, "build-providers.sh")).strip()
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        sys.exit(f"the benchmarks need the real releases of e2e/scripts/build-providers.sh (make providers), "
                 f"which failed: {detail.strip()[-2000:]}")
    return os.path.dirname(images)


def releases() -> str:
    """The assembled Cluster API releases, clusterctl's local-repository layout."""
    return os.path.join(providers_dir(), "releases")


def cert_manager_crds() -> str:
    """Only the CustomResourceDefinitions of the cert-manager manifest build-providers.sh renders, in
    crds.yaml beside it (the file the tests' capi_test_support::cert_manager_crds writes, same
    content): the releases hold cert-manager objects, whose kinds must exist though no
    cert-manager runs."""
    version = next(line.split("=", 1)[1].strip() for line in open(os.path.join(SCRIPTS, "versions.env"))
                   if line.startswith("CERT_MANAGER_VERSION="))
    manifest = os.path.join(providers_dir(), f"cert-manager-{version}", "cert-manager.yaml")
    out = os.path.join(os.path.dirname(manifest), "crds.yaml")
    if not os.path.isfile(out):
        docs = [d for d in open(manifest).read().split("\n---")
                if any(line.rstrip() == "kind: CustomResourceDefinition" for line in d.split("\n"))]
        if not docs:
            sys.exit(f"{manifest} holds no CustomResourceDefinition")
        tmp = f"{out}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write("\n---".join(docs).lstrip("\n"))
        os.replace(tmp, out)
    return out

class Cluster:
    """A fresh local control plane (e2e/scripts/cluster-up.sh) in a directory of its own."""

    def __init__(self, audit: bool = False):
        self.dir = tempfile.mkdtemp(prefix="capi-bench-")
        os.rmdir(self.dir)
        self.kubeconfig = run(os.path.join(SCRIPTS, "cluster-up.sh"), "--dir", self.dir,
                              *(["--audit"] if audit else [])).strip()
        self.audit_log = os.path.join(self.dir, "logs", "audit.log")
        self.kubectl = os.path.join(run(os.path.join(SCRIPTS, "build.sh")).strip(), "kubectl")

    def k(self, *args, stdin=None):
        p = subprocess.run([self.kubectl, "--kubeconfig", self.kubeconfig, *args],
                           capture_output=True, text=True, input=stdin)
        if p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} failed: {p.stderr.strip()[-2000:]}")
        return p.stdout

    def down(self):
        subprocess.run([os.path.join(SCRIPTS, "cluster-down.sh"), "--dir", self.dir], capture_output=True)


class Watch:
    """Objects of one resource reaching a condition, seen through one `kubectl get --watch` that
    runs from before the timed step: the moment the last of them gets there is taken when its
    watch event arrives. Both sides of a comparison are timed this way (the operator's provider
    objects, the floor's Deployments), so neither pays a process start, and neither pays
    `kubectl wait`'s fixed ~0.1 s per object already there, which fell on whichever side
    finished its objects out of the order kubectl checks them in."""

    def __init__(self, c: "Cluster", resource: str, condition: str):
        column = f".object.status.conditions[?(@.type=='{condition}')].status"
        self.p = subprocess.Popen(
            [c.kubectl, "--kubeconfig", c.kubeconfig, "get", resource, "-A", "--watch", "--output-watch-events",
             "--no-headers", "-o", f"custom-columns=E:.type,NS:.object.metadata.namespace,N:.object.metadata.name,C:{column}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.resource = resource
        self.state: dict = {}
        # Lines that name no object (a watch ERROR event, a Status): kept to say why a wait failed.
        self.odd: list = []
        self.done: dict = {}
        self.lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            now = time.monotonic()
            parts = line.split()
            if len(parts) < 4:
                continue
            event, ns, name, status = parts[:4]
            if event not in ("ADDED", "MODIFIED", "DELETED") or name == "<none>":
                self.odd.append(line.strip())
                continue
            with self.lock:
                if event == "DELETED":
                    self.state.pop((ns, name), None)
                else:
                    self.state[(ns, name)] = status == "True"
                if all(self.state.values()):
                    self.done.setdefault(len(self.state), now)
                self.lock.notify_all()

    def wait(self, count: int, timeout: float = 600) -> float:
        """The monotonic time at which `count` objects first all had the condition True."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not any(k >= count for k in self.done):
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None:
                    why = "" if self.p.poll() is None else f"; kubectl exited {self.p.returncode}: {self.p.stderr.read()[-1000:]}"
                    raise RuntimeError(f"{count} {self.resource} never all had the condition: {self.state}"
                                       f"{why}; other lines: {self.odd[-5:]}")
                self.lock.wait(min(left, 1))
            return min(t for k, t in self.done.items() if k >= count)

    def stop(self):
        self.p.kill()
        self.p.wait()


def watches(c: "Cluster", kinds, condition: str) -> list:
    """One Watch per resource in `kinds` ({resource: how many objects}), with its count."""
    return [(Watch(c, resource, condition), count) for resource, count in kinds.items()]


def all_there(ws: list, timeout: float = 600) -> float:
    """When the last of the watched objects got there; the watches are stopped."""
    try:
        return max(w.wait(count, timeout) for w, count in ws)
    finally:
        for w, _ in ws:
            w.stop()
