#!/usr/bin/env python3
"""This operator and kubernetes-sigs/cluster-api-operator side by side (`make bench`, the peer scenario).

The same work for both, each run on a fresh local control plane whose API server keeps an audit
log of writes (cluster-up.sh --audit):

real3    the real v1.12.0 core, kubeadm bootstrap and kubeadm control-plane releases, read from
         ConfigMaps (the same ConfigMaps for both: this operator selects them by one label, the Go
         operator by its name/type labels);
many-N   N = 1, 10, 30 providers of scale.py's many-providers scenario (the sample core provider
         and N-1 sample infrastructure providers), also from ConfigMaps.

Each operator declares them in its own API (management.cluster.x-k8s.io/v1alpha1 here,
operator.cluster.x-k8s.io/v1alpha2 for the Go operator, whose CRDs come from its release) and
runs with the flags its Helm chart sets (both elect a leader; listen addresses on free ports).
The Go operator is the v0.28.0 build of e2e/scripts/build-providers.sh; the bench makes its
webhook server's certificate. Runs alternate between the two operators (which goes first
alternates too). Per run:

- time from applying the provider objects to all Ready, seen by one watch per resource for both
  (common.Watch);
- CPU seconds (utime + stime of the process) from its start to Ready, and per minute of the idle
  window that follows; RSS at Ready, peak (VmHWM) and settled (at the end of the idle window);
- API writes (create/update/patch/delete in the audit log, by the operator's user agent) from its
  start to Ready and over the idle window (5 minutes), Lease renewals counted apart;
- the writes over two periods of a forced 60 s resync (restarted with a 60 s sync period);
- the time to repair a Deployment whose image was edited and one that was deleted ("never" when
  it is not repaired within the timeout);
- binary sizes.

CPU seconds, RSS and writes are per-process counts, meaningful on a busy machine; wall times are
not, so the load average is recorded and the report says when the machine was loaded.

The idle window, the forced resync and the repairs take about 8 minutes per operator (mostly
waiting), the rest of a run about 45 s; so by default they are measured in the first run of the
scenarios BENCH_PEER_LONG names (real3), and every run measures the figures to Ready: 3 runs of
real3, many-1, many-10 and many-30 take about 40 minutes on 2 cores (each figure to Ready a median
of 3, the idle, resync and repair figures of one run). BENCH_PEER_LONG=all measures them in every
run (about 4 hours).

Environment: BENCH_QUICK=1 (one run, real3 and many-10, 30 s idle, 65 s resync window, 15 s repair
timeout) to check that the scenario works; BENCH_PEER_RUNS, BENCH_PEER_IDLE (seconds),
BENCH_PEER_SCENARIOS (comma-separated, e.g. real3,many-1), BENCH_PEER_LONG (comma-separated
scenarios, or all) override either mode.
Results go to --out (default ~/.cache/capi-provider-operator/bench/peer.json) for report.py.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import install
import scale
from common import (BIN, ROOT, SCRIPTS, cert_manager_crds, commit, releases, shipped_env, Cluster, all_there, run,
                    watches)

QUICK = os.environ.get("BENCH_QUICK") == "1"
RUNS = int(os.environ.get("BENCH_PEER_RUNS", "1" if QUICK else "3"))
IDLE = int(os.environ.get("BENCH_PEER_IDLE", "30" if QUICK else "300"))
RESYNC = 60
RESYNC_WINDOW = 65 if QUICK else 2 * RESYNC + 10
REPAIR_TIMEOUT = 15 if QUICK else 60
SCENARIOS = os.environ.get("BENCH_PEER_SCENARIOS", "real3,many-10" if QUICK else "real3,many-1,many-10,many-30")
# The scenarios whose first run also measures the idle window, the forced resync and the repairs.
LONG = os.environ.get("BENCH_PEER_LONG", "all" if QUICK else "real3")
# The figures only those runs measure.
LONG_KEYS = ("idle_s", "cpu_per_idle_min_s", "idle_writes", "idle_lease_writes", "idle_writes_by", "rss_settled_mib",
             "resync_writes", "resync_writes_by", "repair_image_s", "repair_deleted_s", "repair_timeout_s")
GO_VERSION = "v0.28.0"
OURS, GO = "ours", "go"
GROUP = {OURS: "management.cluster.x-k8s.io", GO: "operator.cluster.x-k8s.io"}
VERSION = {OURS: "v1alpha1", GO: "v1alpha2"}
# The name and type labels the Go operator's documentation gives its release ConfigMaps.
GO_TYPE = {"CoreProvider": "core", "BootstrapProvider": "bootstrap", "ControlPlaneProvider": "control-plane",
           "InfrastructureProvider": "infrastructure"}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def go_dir() -> str:
    images = run(os.path.join(SCRIPTS, "build-providers.sh")).strip()
    return os.path.join(os.path.dirname(images), f"cluster-api-operator-{GO_VERSION}")


class Workload:
    """What both operators are given: (kind, namespace, name) of each provider, its version and
    the release ConfigMaps, labelled for both."""

    def __init__(self, scenario: str):
        self.scenario = scenario
        self.providers, self.configmaps = [], []
        if scenario == "real3":
            repo = releases()
            self.version = install.VERSION
            for kind, ns, name, label, file in install.PROVIDERS:
                self.providers.append((kind, ns, name))
                self.configmaps.append(self._labelled(json.loads(install.configmap(ns, kind, name, label, file, repo)),
                                                      kind, name))
        else:
            self.version = "v0.2.0"
            for kind, ns, name, comp, meta in scale.providers(int(scenario.split("-")[1])):
                self.providers.append((kind, ns, name))
                cm = json.loads(scale.configmap(kind, ns, name, comp, meta))
                cm["metadata"]["labels"]["bench"] = f"{name}-{kind.lower()}"
                self.configmaps.append(self._labelled(cm, kind, name))

    @staticmethod
    def _labelled(cm: dict, kind: str, name: str) -> str:
        cm["metadata"]["labels"].update({"provider.cluster.x-k8s.io/name": name,
                                         "provider.cluster.x-k8s.io/type": GO_TYPE[kind]})
        return json.dumps(cm)

    def objects(self, who: str) -> str:
        docs = []
        for kind, ns, name in self.providers:
            labels = ({"bench": f"{name}-{kind.lower()}"} if who == OURS else
                      {"provider.cluster.x-k8s.io/name": name, "provider.cluster.x-k8s.io/type": GO_TYPE[kind]})
            docs.append(json.dumps({"apiVersion": f"{GROUP[who]}/{VERSION[who]}", "kind": kind,
                                    "metadata": {"name": name, "namespace": ns},
                                    "spec": {"version": self.version,
                                             "fetchConfig": {"selector": {"matchLabels": labels}}}}))
        return "\n".join(docs)

    def resources(self, who: str) -> dict:
        out: dict = {}
        for kind, *_ in self.providers:
            r = f"{kind.lower()}s.{GROUP[who]}"
            out[r] = out.get(r, 0) + 1
        return out


def proc_status(pid: int, field: str) -> float:
    """A memory field of /proc/PID/status (VmRSS, VmHWM) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


class Peer:
    """One operator process: ours (the release build, the environment its Deployment sets) or
    the Go one (in a mount namespace of its own whose service account namespace file tells
    controller-runtime where its leader election Lease goes, as in a Pod)."""

    def __init__(self, who: str, c: Cluster, godir: str, *extra: str):
        self.who = who
        log = open(os.path.join(c.dir, f"{who}.log"), "a")
        env = dict(os.environ, KUBECONFIG=c.kubeconfig)
        if who == OURS:
            env.update(shipped_env(), POD_NAME="bench", RUST_LOG="info")
            cmd = [BIN, "run", "--leader-elect", "--leader-election-namespace", "default",
                   "--metrics-bind-address", f"127.0.0.1:{free_port()}",
                   "--health-probe-bind-address", f"127.0.0.1:{free_port()}", "--log-format=json", *extra]
        else:
            certs = webhook_certs(c.dir)
            # The flags the chart's Deployment template sets with its default values.
            args = ["--v=2", f"--health-addr=127.0.0.1:{free_port()}",
                    f"--diagnostics-address=127.0.0.1:{free_port()}", "--leader-elect=true",
                    f"--profiler-address=localhost:{free_port()}",
                    # Not chart flags: where its Pod's certificate volume and port would be.
                    f"--webhook-cert-dir={certs}", f"--webhook-port={free_port()}", *extra]
            # A tmpfs over /run, private to it: a fresh machine has no /run/secrets to mount over,
            # and the host's /run must not be changed.
            inner = ("mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && "
                     "printf default > /run/secrets/kubernetes.io/serviceaccount/namespace && exec \"$0\" \"$@\"")
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner,
                   os.path.join(godir, "cluster-api-operator"), *args]
        self.p = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        self.started = time.monotonic()

    def cpu(self) -> float:
        return scale.cpu_seconds(self.p.pid)

    def rss(self) -> float:
        return proc_status(self.p.pid, "VmRSS")

    def status(self, field: str) -> float:
        return proc_status(self.p.pid, field)

    def hwm(self) -> float:
        return proc_status(self.p.pid, "VmHWM")

    def user_agent(self) -> str:
        return "capi-provider-operator/" if self.who == OURS else "cluster-api-operator/"

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def webhook_certs(into: str) -> str:
    d = os.path.join(into, "go-webhook-certs")
    if not os.path.isdir(d):
        os.makedirs(d)
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
            "/CN=capi-operator-webhook-service.capi-operator-system.svc",
            "-keyout", os.path.join(d, "tls.key"), "-out", os.path.join(d, "tls.crt"))
    return d


class Audit:
    """The API server's audit log: writes by user agent, from a point on."""

    def __init__(self, path: str):
        self.path = path

    def mark(self) -> int:
        return os.path.getsize(self.path) if os.path.exists(self.path) else 0

    def writes(self, agent: str, since: int, until: int | None = None) -> tuple[int, int, dict]:
        """(writes other than Lease renewals, Lease writes, every write counted by "verb resource") by
        clients whose user agent starts with `agent`, from one read of the log (the by-kind counts, for the
        report's causes, add up to the totals)."""
        by = self.writes_by(agent, since, until)
        leases = sum(n for (_, resource), n in by.items() if resource == "leases")
        return sum(by.values()) - leases, leases, {f"{v} {res}": n for (v, res), n in by.items()}

    def writes_by(self, agent: str, since: int, until: int | None = None) -> dict:
        """Writes by clients whose user agent starts with `agent`, by (verb, resource)."""
        by: dict = {}
        with open(self.path) as f:
            f.seek(since)
            text = f.read() if until is None else f.read(until - since)
        for line in text.splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("verb") not in WRITES or not e.get("userAgent", "").startswith(agent):
                continue
            ref = e.get("objectRef") or {}
            key = (e["verb"], ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else ""))
            by[key] = by.get(key, 0) + 1
        return by


def prepare(c: Cluster, w: Workload, who: str, godir: str):
    c.k("apply", "--server-side", "-f", cert_manager_crds())
    c.k("apply", "--server-side", "-f", "-", stdin="\n".join(
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}) for _, ns, _ in w.providers))
    crds = os.path.join(ROOT, "manifests/crds") if who == OURS else os.path.join(godir, "crds")
    c.k("apply", "--server-side", "-f", crds)
    c.k("wait", "--for", "condition=Established", "--timeout", "60s", "-f", crds)
    c.k("apply", "--server-side", "-f", "-", stdin="\n".join(w.configmaps))


def deployment_of(c: Cluster, ns: str) -> tuple[str, str]:
    """The name and first container image of the Deployment in `ns`."""
    out = c.k("get", "deployments", "-n", ns, "-o", "jsonpath={.items[0].metadata.name} "
              "{.items[0].spec.template.spec.containers[0].image}").split()
    return out[0], out[1]


def repaired(c: Cluster, ns: str, name: str, image: str, change, timeout: float) -> float | None:
    """Seconds from `change` (a function) until Deployment ns/name exists with `image` again, seen by a
    watch; None when not within `timeout`."""
    p = subprocess.Popen([c.kubectl, "--kubeconfig", c.kubeconfig, "get", "deployments", "-n", ns,
                          "--field-selector", f"metadata.name={name}", "--watch", "--output-watch-events",
                          "--no-headers", "-o", "custom-columns=E:.type,I:.object.spec.template.spec.containers[0].image"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = threading.Event()
    changed = threading.Event()
    at: list = []

    def read():
        for line in p.stdout:
            parts = line.split()
            if len(parts) < 2:
                continue
            if parts[0] == "DELETED" or parts[1] != image:
                changed.set()
            elif changed.is_set() and not at:
                at.append(time.monotonic())
                seen.set()
    threading.Thread(target=read, daemon=True).start()
    time.sleep(1)
    t0 = time.monotonic()
    change()
    seen.wait(timeout)
    p.kill()
    p.wait()
    return at[0] - t0 if at else None


def long_run(scenario: str, i: int) -> bool:
    """Whether run `i` of `scenario` measures the idle window, the forced resync and the repairs."""
    return LONG == "all" or (i == 0 and scenario in LONG.split(","))


def measure(who: str, w: Workload, godir: str, long: bool) -> dict:
    """One run of one operator on a fresh control plane; `long`: with the idle window, the forced
    resync and the repairs."""
    # Other work on the machine, before this run's control plane adds its own.
    load0 = os.getloadavg()[0]
    c = Cluster(audit=True)
    op = None
    try:
        audit = Audit(c.audit_log)
        prepare(c, w, who, godir)
        ws = watches(c, w.resources(who), "Ready")
        mark0 = audit.mark()
        op = Peer(who, c, godir)
        time.sleep(3)
        if op.p.poll() is not None:
            # Not a wait for Ready that times out minutes later: say why at once.
            tail = open(os.path.join(c.dir, f"{who}.log"), errors="replace").read()[-2000:]
            raise RuntimeError(f"the {who} operator exited ({op.p.returncode}) before its run:\n{tail}")
        t0 = time.monotonic()
        c.k("apply", "--server-side", "-f", "-", stdin=w.objects(who))
        r = {"ready_s": all_there(ws) - t0, "cpu_to_ready_s": op.cpu(), "rss_ready_mib": op.rss(),
             # What the RSS is made of: the binary's pages that ran, and allocated memory.
             "rss_file_ready_mib": op.status("RssFile"), "rss_anon_ready_mib": op.status("RssAnon")}
        r["writes_to_ready"], r["lease_writes_to_ready"], r["writes_to_ready_by"] = audit.writes(op.user_agent(), mark0)
        time.sleep(5)
        if not long:
            return {**r, "rss_peak_mib": op.hwm(), "load": load0}
        # The idle window: everything Ready, nothing changes.
        cpu0, mark1, t1 = op.cpu(), audit.mark(), time.monotonic()
        rss = []
        while time.monotonic() - t1 < IDLE:
            time.sleep(min(5, max(0, IDLE - (time.monotonic() - t1))))
            rss.append(op.rss())
        minutes = (time.monotonic() - t1) / 60
        r["idle_s"] = IDLE
        r["cpu_per_idle_min_s"] = (op.cpu() - cpu0) / minutes
        r["idle_writes"], r["idle_lease_writes"], r["idle_writes_by"] = audit.writes(op.user_agent(), mark1)
        r["rss_settled_mib"], r["rss_peak_mib"] = op.rss(), op.hwm()
        r["resync_writes"], r["resync_writes_by"] = forced_resync(c, op, who, godir, audit)
        return {**r, **repairs(c, w, who, godir), "load": load0}
    finally:
        if op:
            op.stop()
        c.down()


def forced_resync(c: Cluster, op: Peer, who: str, godir: str, audit: Audit) -> tuple[int, dict]:
    """Writes other than Lease renewals over RESYNC_WINDOW s of a 60 s sync period, counted from
    20 s after the restart (the Go operator waits for its predecessor's Lease to expire), and
    all writes by verb and resource."""
    op.stop()
    flag = ["--sync-period-seconds", str(RESYNC)] if who == OURS else [f"--sync-period={RESYNC}s"]
    again = Peer(who, c, godir, *flag)
    try:
        time.sleep(20)
        mark = audit.mark()
        time.sleep(RESYNC_WINDOW)
        writes, _, by = audit.writes(again.user_agent(), mark)
        return writes, by
    finally:
        again.stop()


def repairs(c: Cluster, w: Workload, who: str, godir: str) -> dict:
    """Time to repair an edited image, then a deleted Deployment, of the core provider."""
    op = Peer(who, c, godir)
    try:
        # The restarted operator (the Go one waits for its predecessor's Lease) has settled.
        time.sleep(20)
        ns = w.providers[0][1]
        name, image = deployment_of(c, ns)
        edited = repaired(c, ns, name, image, lambda: c.k("set", "image", "-n", ns, f"deployment/{name}",
                                                          "*=registry.invalid/edited:v0"), REPAIR_TIMEOUT)
        if edited is None:
            # Put it back by hand so the deletion below is measured alone.
            c.k("set", "image", "-n", ns, f"deployment/{name}", f"*={image}")
        deleted = repaired(c, ns, name, image, lambda: c.k("delete", "deployment", "-n", ns, name, "--wait=false"),
                           REPAIR_TIMEOUT)
        return {"repair_image_s": edited, "repair_deleted_s": deleted, "repair_timeout_s": REPAIR_TIMEOUT}
    finally:
        op.stop()


def sizes(godir: str) -> dict:
    """Binary sizes, and each binary gzip-compressed (what it adds to an image as a layer)."""
    out = {}
    for who, path in ((OURS, BIN), (GO, os.path.join(godir, "cluster-api-operator"))):
        data = open(path, "rb").read()
        out[who] = {"binary_mib": len(data) / 2**20, "gzip_mib": len(gzip.compress(data, 6)) / 2**20}
    return out


def summary(xs: list) -> dict:
    """Median and range of the values measured (None: never happened within the timeout)."""
    got = [x for x in xs if x is not None]
    return {"median": statistics.median(got) if got else None, "min": min(got) if got else None,
            "max": max(got) if got else None, "never": len(xs) - len(got)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/capi-provider-operator/bench/peer.json"))
    a = ap.parse_args()
    # Fails here, before any run, when build-providers.sh cannot give the real releases.
    releases()
    godir = go_dir()
    runs: dict = {s: {OURS: [], GO: []} for s in SCENARIOS.split(",")}
    for i in range(RUNS):
        for scenario in runs:
            w = Workload(scenario)
            for who in ((OURS, GO) if i % 2 == 0 else (GO, OURS)):
                r = measure(who, w, godir, long_run(scenario, i))
                runs[scenario][who].append(r)
                print(f"peer {scenario} run {i + 1} {who}: {json.dumps(r)}", file=sys.stderr)
    results = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "go_version": GO_VERSION, "runs": RUNS,
               "quick": QUICK, "long": LONG, "cores": os.cpu_count(), "idle_s": IDLE, "resync_s": RESYNC,
               "resync_window_s": RESYNC_WINDOW, "sizes": sizes(godir), "scenarios": {}}
    for scenario, by in runs.items():
        results["scenarios"][scenario] = {
            who: {k: summary([r[k] for r in rs if k in r]) for k in {k: 0 for r in rs for k in r}
                  # The by-kind counts are kept per run for the report's causes, not summarised.
                  if k not in ("idle_s", "repair_timeout_s") and not k.endswith("_by")}
            for who, rs in by.items()}
        results["scenarios"][scenario]["repair_timeout_s"] = REPAIR_TIMEOUT
        results["scenarios"][scenario]["long_runs"] = sum(long_run(scenario, i) for i in range(RUNS))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
