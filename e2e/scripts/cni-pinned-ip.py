#!/usr/bin/env python3
"""The real node's IPAM plugin (CNI type `capi-pinned-ip`): host-local, plus a pod's pinned address.

A pod annotated `cni.projectcalico.org/ipAddrs: '["10.213.X.N"]'` (Calico's fixed-address
annotation, which the workload-cluster tests put on the in-memory provider: it publishes its own
pod IP as each workload cluster's endpoint, so that address must survive restarts and upgrades)
gets exactly that address; any other pod gets the next free one of the pool, as with host-local.

Why a plugin: containerd 1.6 does not hand pod annotations to CNI, only CNI_ARGS with
K8S_POD_NAMESPACE and K8S_POD_NAME; host-local takes a requested address as `IP=<addr>` in
CNI_ARGS. So on ADD this reads the pod from the API server (its address and client certificate
are extra keys of the `ipam` section, which host-local ignores), adds `IP=<addr>` when the
annotation is there, and runs host-local; DEL and CHECK run host-local unchanged (it releases by
container ID). The pinned addresses have a range of their own (`pinnedRange`, after the pool of
`ranges`, one data directory for both): host-local hands unpinned pods the pool's addresses in
turn, so a pinned address inside the pool would sooner or later be taken by another pod while
its own is being replaced. For a pinned pod the ranges become `pinnedRange`. An address outside
`pinnedRange`, a malformed
annotation or an API server that cannot be asked fail the ADD with a message naming the pod, so
the kubelet's FailedCreatePodSandBox event says why, and a pinned pod never starts on another
address. An address another pod holds fails as host-local says; the kubelet retries.

Only Python's standard library: the node runs it from this checkout, nothing to build.
"""
import http.client
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys

ANNOTATION = "cni.projectcalico.org/ipAddrs"


class PodError(Exception):
    """Why this pod cannot get an address; becomes the CNI error's message."""


class ApiServer(http.client.HTTPSConnection):
    """HTTPS to the API server's address, verifying its certificate for `server_name`."""

    def __init__(self, url, server_name, context):
        host, port = url.removeprefix("https://").rsplit(":", 1)
        super().__init__(host, int(port), context=context, timeout=10)
        self.server_name = server_name

    def connect(self):
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.server_name)


def cni_args():
    """CNI_ARGS as a dict (`K1=V1;K2=V2`)."""
    pairs = (kv.split("=", 1) for kv in os.environ.get("CNI_ARGS", "").split(";") if "=" in kv)
    return dict(pairs)


def pinned(ipam, namespace, name):
    """The address the pod's annotation asks for, or None."""
    ctx = ssl.create_default_context(cafile=ipam["ca"])
    ctx.load_cert_chain(ipam["cert"], ipam["key"])
    conn = ApiServer(ipam["server"], ipam.get("serverName", "kubernetes"), ctx)
    try:
        conn.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        resp = conn.getresponse()
        body = resp.read()
    except OSError as e:
        raise PodError(f"pod {namespace}/{name}: cannot read its {ANNOTATION} annotation: {e}") from e
    if resp.status != 200:
        raise PodError(f"pod {namespace}/{name}: reading its annotations: HTTP {resp.status}")
    value = (json.loads(body).get("metadata", {}).get("annotations") or {}).get(ANNOTATION)
    if value is None:
        return None
    try:
        addrs = [ipaddress.IPv4Address(a) for a in json.loads(value)]
    except (ValueError, TypeError) as e:
        raise PodError(f"pod {namespace}/{name}: annotation {ANNOTATION}={value!r}: "
                       "expected a JSON list holding one IPv4 address") from e
    if len(addrs) != 1:
        raise PodError(f"pod {namespace}/{name}: annotation {ANNOTATION}={value!r}: expected one address")
    return addrs[0]


def pinned_config(conf, addr):
    """`conf` with host-local's ranges narrowed to the pinned range, if it holds `addr`; else None
    and the range, for the message."""
    pin = conf["ipam"]["pinnedRange"]
    start, end = ipaddress.IPv4Address(pin["rangeStart"]), ipaddress.IPv4Address(pin["rangeEnd"])
    if not start <= addr <= end:
        return None, f"{start}-{end}"
    base = dict(conf["ipam"]["ranges"][0][0], rangeStart=str(start), rangeEnd=str(end))
    return dict(conf, ipam=dict(conf["ipam"], ranges=[[base]])), None


def host_local(stdin, env, addr, pod):
    """Runs host-local on the same configuration with `env`; its output and status are ours, its
    error naming the pod and its pinned address when it refused that one."""
    path = next((os.path.join(d, "host-local") for d in env.get("CNI_PATH", "").split(os.pathsep)
                 if os.access(os.path.join(d, "host-local"), os.X_OK)), "/usr/lib/cni/host-local")
    run = subprocess.run([path], input=stdin, env=env, stdout=subprocess.PIPE, check=False)
    out = run.stdout
    if run.returncode != 0 and addr is not None:
        try:
            err = json.loads(out)
            err["msg"] = f"pod {pod}: pinned address {addr} (annotation {ANNOTATION}): {err.get('msg', '')}"
            out = json.dumps(err).encode()
        except ValueError:
            pass
    sys.stdout.buffer.write(out)
    sys.exit(run.returncode)


def fail(conf, message):
    """Ends the call with a CNI error: a plugin-specific code (>= 100), as the specification asks."""
    json.dump({"cniVersion": conf.get("cniVersion", "1.0.0"), "code": 100, "msg": message}, sys.stdout)
    sys.exit(1)


def main():
    stdin = sys.stdin.buffer.read()
    conf = json.loads(stdin)
    env = dict(os.environ)
    addr = None
    args = cni_args()
    ns, name = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
    if env.get("CNI_COMMAND") == "ADD" and ns and name:
        try:
            addr = pinned(conf["ipam"], ns, name)
        except PodError as e:
            fail(conf, str(e))
        if addr is not None:
            narrowed, pin_range = pinned_config(conf, addr)
            if narrowed is None:
                fail(conf, f"pod {ns}/{name}: pinned address {addr} (annotation {ANNOTATION}) "
                           f"is outside this node's range for pinned addresses {pin_range}")
            stdin = json.dumps(narrowed).encode()
            env["CNI_ARGS"] = ";".join(filter(None, [env.get("CNI_ARGS", ""), f"IP={addr}"]))
    host_local(stdin, env, addr, f"{ns}/{name}")


if __name__ == "__main__":
    main()
