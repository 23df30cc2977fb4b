#!/usr/bin/env python3
"""ghcr.io, github.com and api.github.com for the user's path (docs-check's `real-node-release`):
the README's quick start runs its commands as written, against local servers holding the
release output and the third-party releases it names.

    public-hosts.py --dist DIR --cluster-dir DIR --node-ip IP --providers DIR --helm HELM --kubectl KUBECTL

--dist       the release output: capi-provider-operator.yaml, charts/capi-provider-operator-*.tgz
--cluster-dir the cluster's directory: the registry's pid file goes there (cluster-down.sh stops
             the processes its *.pid files name), everything else into its public-hosts/ (STATE)
--node-ip    the host end of the real node's veth: pods reach the servers there
--providers  what e2e/scripts/build-providers.sh built (cert-manager, the Cluster API releases)

What it starts, then prints `ready` and serves until killed:

- a CA and one serving certificate for the public names; STATE/ca-bundle.crt is the system's
  CA bundle plus that CA (the block's SSL_CERT_FILE: helm and kubectl, Go programs, read it);
- ghcr.io: a registry (distribution, registry.sh) on a loopback address of its own, port 443,
  holding the chart pushed with `helm push`, as the release workflow pushes it;
- github.com and api.github.com: one HTTPS server on a second loopback address and on
  --node-ip, port 443: release downloads (`/OWNER/REPO/releases/download/TAG/FILE`) and the part
  of the releases API the operator reads (a release by tag, the releases list, an asset);
- STATE/hosts: /etc/hosts plus those names; docs-check bind-mounts it over /etc/hosts in a mount
  namespace of the block's own, so only the block sees it;
- for the operator's pods, which resolve and trust names in the pod: a mutating admission
  webhook on pods of capi-operator-system adding host aliases for the GitHub names (to
  --node-ip) and SSL_CERT_FILE naming the CA (from a pod annotation through the downward API),
  which the operator reads besides its built-in roots. Nothing the user applies carries them.
"""

from __future__ import annotations

import argparse
import base64
import glob
import http.server
import json
import os
import random
import re
import shutil
import ssl
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
# The project's GitHub repository; its images and chart live under ghcr.io/<the same path>.
PROJECT = "capi-provider-operator/capi-provider-operator"
CHART_REPO = f"{PROJECT.split('/')[0]}/charts"
OPERATOR_NAMESPACE = "capi-operator-system"
GITHUB_NAMES = ["github.com", "api.github.com", "objects.githubusercontent.com"]
CA_ANNOTATION = "capi-provider-operator.dev/public-hosts-ca"
CA_DIR = "/etc/public-hosts-ca"


def downloads(dist: str, providers: str) -> dict[str, str]:
    """github.com paths (OWNER/REPO/releases/download/TAG/FILE) and the files they serve."""
    charts = glob.glob(os.path.join(dist, "charts", "capi-provider-operator-*.tgz"))
    if len(charts) != 1:
        sys.exit(f"public-hosts: want one charts/capi-provider-operator-*.tgz in {dist}, found {charts}")
    version = re.sub(r"^capi-provider-operator-(.*)\.tgz$", r"\1", os.path.basename(charts[0]))
    capi = os.path.join(providers, "releases", "cluster-api", "v1.12.0")
    capd = os.path.join(providers, "capd-v1.12.0", "release")
    files = {
        f"{PROJECT}/releases/download/v{version}/capi-provider-operator.yaml":
            os.path.join(dist, "capi-provider-operator.yaml"),
        "cert-manager/cert-manager/releases/download/v1.11.5/cert-manager.yaml":
            os.path.join(providers, "cert-manager-v1.11.5", "cert-manager.yaml"),
        "kubernetes-sigs/cluster-api/releases/download/v1.12.0/core-components.yaml":
            os.path.join(capi, "core-components.yaml"),
        "kubernetes-sigs/cluster-api/releases/download/v1.12.0/metadata.yaml": os.path.join(capi, "metadata.yaml"),
        # The docker provider's components, as the cluster-api release names them.
        "kubernetes-sigs/cluster-api/releases/download/v1.12.0/infrastructure-components-development.yaml":
            os.path.join(capd, "infrastructure-components.yaml"),
    }
    missing = [f for f in files.values() if not os.path.isfile(f)]
    if missing:
        sys.exit(f"public-hosts: missing {missing} (make providers, and the release output)")
    return files


def certificates(state: str, ips: list[str]) -> None:
    """STATE/ca.crt, STATE/tls.crt (the serving certificate, then the CA) and STATE/tls.key."""
    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, cwd=state, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
    run("openssl", "req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "2",
        "-subj", "/CN=public-hosts test CA", "-out", "ca.crt")
    sans = ",".join([f"DNS:{n}" for n in ["ghcr.io", *GITHUB_NAMES]] + [f"IP:{ip}" for ip in ips])
    with open(os.path.join(state, "ext.cnf"), "w") as f:
        f.write(f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
                f"subjectAltName={sans}\n")
    run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "tls.key")
    run("openssl", "req", "-new", "-key", "tls.key", "-subj", "/CN=public-hosts", "-out", "tls.csr")
    run("openssl", "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", "ext.cnf", "-out", "leaf.crt")
    with open(os.path.join(state, "tls.crt"), "w") as out:
        for name in ("leaf.crt", "ca.crt"):
            out.write(open(os.path.join(state, name)).read())
    with open(os.path.join(state, "ca-bundle.crt"), "w") as out:
        out.write(open("/etc/ssl/certs/ca-certificates.crt").read())
        out.write(open(os.path.join(state, "ca.crt")).read())


class GitHub:
    """Release downloads and the releases API over the same files."""

    def __init__(self, files: dict[str, str]):
        self.files = files
        self.assets = sorted(files)  # an asset's id is its index + 1

    def release(self, repo: str, tag: str) -> dict | None:
        prefix = f"{repo}/releases/download/{tag}/"
        assets = [{"id": i + 1, "name": p[len(prefix):]} for i, p in enumerate(self.assets) if p.startswith(prefix)]
        return {"tag_name": tag, "draft": False, "prerelease": False, "assets": assets} if assets else None

    def answer(self, host: str, path: str) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0].strip("/")
        if host == "github.com" and path in self.files:
            return 200, "application/octet-stream", open(self.files[path], "rb").read()
        if host != "api.github.com":
            return 404, "text/plain", b"not found\n"
        m = re.fullmatch(r"repos/([^/]+/[^/]+)/releases(?:/tags/([^/]+)|/assets/(\d+))?", path)
        if not m:
            return 404, "application/json", b'{"message": "Not Found"}'
        repo, tag, asset = m.groups()
        if asset:
            i = int(asset) - 1
            if 0 <= i < len(self.assets) and self.assets[i].startswith(f"{repo}/"):
                return 200, "application/octet-stream", open(self.files[self.assets[i]], "rb").read()
            return 404, "application/json", b'{"message": "Not Found"}'
        if tag:
            r = self.release(repo, tag)
            return (200, "application/json", json.dumps(r).encode()) if r else (
                404, "application/json", b'{"message": "Not Found"}')
        tags = sorted({p.split("/")[4] for p in self.assets if p.startswith(f"{repo}/")}, reverse=True)
        return 200, "application/json", json.dumps([self.release(repo, t) for t in tags]).encode()


def pod_patch(pod: dict, node_ip: str, ca_pem: str) -> list[dict]:
    """The JSON patch giving an operator pod the public names and the CA."""
    spec, meta = pod.get("spec", {}), pod.get("metadata", {})
    ops: list[dict] = []
    if "annotations" not in meta:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    ops.append({"op": "add", "path": "/metadata/annotations/" + CA_ANNOTATION.replace("/", "~1"), "value": ca_pem})
    aliases = spec.get("hostAliases", []) + [{"ip": node_ip, "hostnames": GITHUB_NAMES}]
    ops.append({"op": "add", "path": "/spec/hostAliases", "value": aliases})
    volume = {"name": "public-hosts-ca", "downwardAPI": {"items": [
        {"path": "ca-bundle.crt", "fieldRef": {"fieldPath": f"metadata.annotations['{CA_ANNOTATION}']"}}]}}
    ops.append({"op": "add", "path": "/spec/volumes", "value": spec.get("volumes", []) + [volume]})
    for i, c in enumerate(spec.get("containers", [])):
        mount = {"name": "public-hosts-ca", "mountPath": CA_DIR, "readOnly": True}
        env = {"name": "SSL_CERT_FILE", "value": f"{CA_DIR}/ca-bundle.crt"}
        ops.append({"op": "add", "path": f"/spec/containers/{i}/volumeMounts",
                    "value": c.get("volumeMounts", []) + [mount]})
        ops.append({"op": "add", "path": f"/spec/containers/{i}/env", "value": c.get("env", []) + [env]})
    return ops


def serve(addr: tuple[str, int], handler, state: str) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(addr, handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(state, "tls.crt"), os.path.join(state, "tls.key"))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def handlers(github: GitHub, node_ip: str, ca_pem: str):
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            sys.stderr.write(f"{self.headers.get('Host', '-')} {fmt % args}\n")

        def reply(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    class Public(Quiet):
        def do_GET(self) -> None:
            host = (self.headers.get("Host") or "").split(":")[0]
            self.reply(*github.answer(host, self.path))

        do_HEAD = do_GET

    class Webhook(Quiet):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            req = review["request"]
            patch = pod_patch(req["object"], node_ip, ca_pem)
            response = {"uid": req["uid"], "allowed": True, "patchType": "JSONPatch",
                        "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
            self.reply(200, "application/json", json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}).encode())

    return Public, Webhook


def webhook_config(port: int, ca_pem: str) -> str:
    return json.dumps({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "public-hosts"},
        "webhooks": [{
            "name": "public-hosts.capi-provider-operator.dev",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate",
                             "caBundle": base64.b64encode(ca_pem.encode()).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}},
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
        }],
    })


def start_registry(cluster_dir: str, state: str, addr: str) -> None:
    """ghcr.io: a registry of its own (registry.sh), its pid file in the cluster's directory."""
    subprocess.run(["bash", "-c", f'source "{HERE}/registry.sh"; registry_start "$@"', "registry_start",
                    os.path.join(cluster_dir, "public-hosts-registry.pid"), os.path.join(state, "ghcr-storage"),
                    f"{addr}:443", state, "-", "rw"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    for a in ("--dist", "--cluster-dir", "--node-ip", "--providers", "--helm", "--kubectl"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    args.state = os.path.join(args.cluster_dir, "public-hosts")
    os.makedirs(args.state, exist_ok=True)
    files = downloads(args.dist, args.providers)
    # Two loopback addresses of this run's own (several runs may go at once), each with port 443.
    rnd = random.Random()
    ghcr, github = (f"127.{rnd.randint(100, 199)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}" for _ in range(2))
    certificates(args.state, [ghcr, github, args.node_ip, "127.0.0.1"])
    ca_pem = open(os.path.join(args.state, "ca.crt")).read()

    start_registry(args.cluster_dir, args.state, ghcr)
    chart = glob.glob(os.path.join(args.dist, "charts", "capi-provider-operator-*.tgz"))[0]
    subprocess.run([args.helm, "push", chart, f"oci://{ghcr}:443/{CHART_REPO}",
                    "--ca-file", os.path.join(args.state, "ca.crt")], check=True,
                   stdout=subprocess.DEVNULL, stderr=sys.stderr)

    public, webhook = handlers(GitHub(files), args.node_ip, ca_pem)
    for ip in (github, args.node_ip):
        serve((ip, 443), public, args.state)
    hook = serve(("127.0.0.1", 0), webhook, args.state)
    subprocess.run([args.kubectl, "apply", "-f", "-"], input=webhook_config(hook.server_address[1], ca_pem),
                   text=True, check=True, stdout=subprocess.DEVNULL)

    shutil.copy("/etc/hosts", os.path.join(args.state, "hosts"))
    with open(os.path.join(args.state, "hosts"), "a") as f:
        f.write(f"\n{ghcr} ghcr.io\n{github} {' '.join(GITHUB_NAMES)}\n")
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
