#!/usr/bin/env python3
"""Verifies a release e2e/scripts/release.sh wrote (`make release-check`, and the end of `make release`).

    release-check.py --dir DIST_DIR --key COSIGN_PUB   verify a release against the public key
    release-check.py --self-test                       `make release-self-test`, a step of `make test`
    release-check.py --throwaway DIST_DIR              a release of this checkout into DIST_DIR, signed
                                                       with a throwaway key and verified (docs-check's
                                                       quick start starts from it)

The checks, in this order, so that a tampered copy is refused with the first thing it breaks:

- the signatures, with cosign and the public key, offline (no transparency log; any request
  leaving the machine is refused): SHA256SUMS.sig over SHA256SUMS, each chart's .tgz.sig over it,
  capi-provider-operator-image.index.sig over the image's index (the archive's blob whose digest
  capi-provider-operator-image.digest records);
- the image archive is a whole OCI layout: index.json names that index; every blob the index and
  its manifests name is there, with that digest and size; one image per platform, linux/amd64
  and linux/arm64;
- capi-provider-operator.yaml names every image by digest, the operator's by that index digest,
  and holds the CRDs, RBAC, the Deployment and the admission policy;
- SHA256SUMS lists every file and each matches, then all of dist-check.py's checks (the plugin
  archives, the krew manifest, the chart and its index, the SBOMs);
- the release publishes as it will be published: the image archive, unpacked and pushed to a
  throwaway local registry with `crane push`, comes out with the pinned digest, and `helm push`
  uploads the chart as an OCI artifact whose layer is the .tgz.

`--self-test` builds a release of this checkout into a temporary directory (the plugin of this
machine's debug build, as dist-check does; the operator image `make image` builds) signed with a
throwaway key pair (`cosign generate-key-pair`), verifies it as above, signs the image pushed to
the local registry with `cosign sign --key` and verifies that with `cosign verify --key`, then
tampers with copies of the release and requires each to be refused.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.request

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(SCRIPTS, "..", ".."))
IMAGE = "capi-provider-operator-image.oci.tar"
DIGEST = "capi-provider-operator-image.digest"
INDEX_SIG = "capi-provider-operator-image.index.sig"
MANIFEST = "capi-provider-operator.yaml"
REPO = "ghcr.io/capi-provider-operator/capi-provider-operator"
PLATFORMS = {("linux", "amd64"), ("linux", "arm64")}
KINDS = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
         "ServiceAccount", "Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
# Nothing cosign or helm does here may leave the machine: requests through a proxy nobody listens on.
OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}


def load(name):
    """A sibling script as a module (their names have dashes)."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dist_check = load("dist-check")
Bad = dist_check.Bad
sha256 = dist_check.sha256


def tool(script: str) -> str:
    """The binary a build script of ours prints (built on first use, then cached)."""
    out = subprocess.run([os.path.join(SCRIPTS, script)], capture_output=True, text=True)
    if out.returncode != 0:
        raise Bad(f"{script} failed: {out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


class Tools:
    """cosign, helm and crane, run offline with their state in `home`."""

    def __init__(self, home: str):
        self.cosign, self.helm, self.crane = tool("cosign.sh"), tool("helm.sh"), tool("crane.sh")
        self.env = dict(os.environ, **OFFLINE, TUF_ROOT=os.path.join(home, "tuf"),
                        DOCKER_CONFIG=os.path.join(home, "docker"),
                        HELM_REGISTRY_CONFIG=os.path.join(home, "helm", "registry.json"),
                        HELM_CACHE_HOME=os.path.join(home, "helm", "cache"),
                        HELM_CONFIG_HOME=os.path.join(home, "helm", "config"))

    def run(self, argv: list[str], **env) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(self.env, **env))


def verify_blob(t: Tools, key: str, blob: str, sig: str, what: str) -> None:
    r = t.run([t.cosign, "verify-blob", "--key", key, "--signature", sig, "--insecure-ignore-tlog=true", blob])
    if r.returncode != 0:
        errors = [x for x in (r.stderr or r.stdout).splitlines() if x.startswith("Error:")] or [r.stderr.strip()[-300:]]
        raise Bad(f"{what}: the signature {os.path.basename(sig)} does not verify with {os.path.basename(key)}: "
                  f"{errors[-1]}")


def pinned_digest(d: str) -> str:
    digest = open(os.path.join(d, DIGEST)).read().strip()
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise Bad(f"{DIGEST} holds {digest[:80]!r}, not a sha256 digest")
    return digest


def layout_blob(d: str, digest: str) -> bytes:
    with tarfile.open(os.path.join(d, IMAGE)) as tar:
        try:
            member = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
        except KeyError:
            member = None
        if member is None:
            raise Bad(f"{IMAGE} has no blob {digest}")
        return member.read()


def check_signatures(t: Tools, d: str, key: str, work: str) -> None:
    verify_blob(t, key, os.path.join(d, "SHA256SUMS"), os.path.join(d, "SHA256SUMS.sig"), "SHA256SUMS")
    charts = glob.glob(os.path.join(d, "charts", "*.tgz"))
    if not charts:
        raise Bad("no chart package in charts/")
    for tgz in charts:
        verify_blob(t, key, tgz, tgz + ".sig", f"charts/{os.path.basename(tgz)}")
    index = os.path.join(work, "index.json")
    with open(index, "wb") as f:
        f.write(layout_blob(d, pinned_digest(d)))
    verify_blob(t, key, index, os.path.join(d, INDEX_SIG), f"the image index {pinned_digest(d)}")


def check_layout(d: str) -> None:
    """index.json names the pinned index; every blob it reaches has its digest and size."""
    digest = pinned_digest(d)
    try:
        with tarfile.open(os.path.join(d, IMAGE)) as tar:
            names = tar.getnames()
            blobs = {n.split("/")[-1]: tar.extractfile(n).read() for n in names if n.startswith("blobs/sha256/")}
            top = json.load(tar.extractfile("index.json"))
    except (OSError, KeyError, tarfile.TarError, json.JSONDecodeError) as e:
        raise Bad(f"{IMAGE} is not an OCI layout archive: {e}")
    for name, data in blobs.items():
        if hashlib.sha256(data).hexdigest() != name:
            raise Bad(f"{IMAGE}: blob sha256:{name[:16]}... holds content of another digest "
                      f"(sha256:{hashlib.sha256(data).hexdigest()[:16]}...)")
    if [m["digest"] for m in top.get("manifests", [])] != [digest]:
        raise Bad(f"{IMAGE}: index.json names {[m['digest'] for m in top.get('manifests', [])]}, not {digest}")

    def get(desc: dict) -> bytes:
        data = blobs.get(desc["digest"].split(":", 1)[1])
        if data is None or len(data) != desc["size"]:
            raise Bad(f"{IMAGE}: blob {desc['digest']} missing or not {desc['size']} bytes")
        return data

    index = json.loads(get(top["manifests"][0]))
    platforms = set()
    for entry in index.get("manifests", []):
        platforms.add((entry["platform"]["os"], entry["platform"]["architecture"]))
        manifest = json.loads(get(entry))
        for desc in [manifest["config"], *manifest["layers"]]:
            get(desc)
    if platforms != PLATFORMS:
        raise Bad(f"{IMAGE}: the index has platforms {sorted(platforms)}, not {sorted(PLATFORMS)}")


def check_manifest(d: str) -> None:
    text = open(os.path.join(d, MANIFEST)).read()
    digest = pinned_digest(d)
    images = re.findall(r"^\s*(?:- )?image:\s*['\"]?([^\s'\"]+)['\"]?\s*$", text, re.M)
    if not images:
        raise Bad(f"{MANIFEST} names no image")
    for image in images:
        if not re.search(r"@sha256:[0-9a-f]{64}$", image):
            raise Bad(f"{MANIFEST}: image {image} is not pinned by digest")
    operator = [i for i in images if i.startswith(REPO + "@")]
    if operator != [f"{REPO}@{digest}"]:
        raise Bad(f"{MANIFEST} pins {operator}, but the image archive's index is {digest}")
    if re.search(re.escape(REPO) + r"[:\s'\"]", text):
        raise Bad(f"{MANIFEST} names {REPO} by tag")
    kinds = set(re.findall(r"^kind: (\w+)$", text, re.M))
    if not KINDS <= kinds:
        raise Bad(f"{MANIFEST} lacks {sorted(KINDS - kinds)}")


def verify(t: Tools, d: str, key: str, crates) -> None:
    with tempfile.TemporaryDirectory() as work:
        check_signatures(t, d, key, work)
        check_layout(d)
        check_manifest(d)
        dist_check.check(d, t.helm, crates)


class LocalRegistry:
    """A registry of our own (registry.sh: docker-registry over TLS) on empty storage, no auth."""

    def __init__(self, work: str):
        self.dir = work
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.addr = f"127.0.0.1:{s.getsockname()[1]}"
        self.ca = os.path.join(work, "tls.crt")
        self.pidfile = os.path.join(work, "registry.pid")
        subprocess.run(["bash", "-c", f'set -e; source "{SCRIPTS}/registry.sh"; registry_cert "$1" 127.0.0.1; '
                        'registry_start "$2" "$1/storage" "$3" "$1" - rw', "-", work, self.pidfile, self.addr],
                       check=True, timeout=60)

    def stop(self) -> None:
        try:
            os.killpg(int(open(self.pidfile).read()), signal.SIGTERM)
        except (OSError, ValueError):
            pass

    def manifest(self, repo: str, ref: str, accept: str) -> tuple[str, dict]:
        """The Docker-Content-Digest and the body of a manifest the registry serves."""
        req = urllib.request.Request(f"https://{self.addr}/v2/{repo}/manifests/{ref}", headers={"Accept": accept})
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=self.ca), timeout=30) as r:
            return r.headers["Docker-Content-Digest"], json.load(r)


def rehearse_publishing(t: Tools, d: str, work: str, sign_key: str | None = None, pub: str | None = None,
                        other_pub: str | None = None) -> None:
    """Pushes the image and the chart as the maintainer will (docs/development.md), to a local registry."""
    reg = LocalRegistry(work)
    env = {"SSL_CERT_FILE": reg.ca}
    try:
        digest = pinned_digest(d)
        ref = "capi-provider-operator/capi-provider-operator:release-check"
        layout = os.path.join(work, "layout")
        with tarfile.open(os.path.join(d, IMAGE)) as tar:
            tar.extractall(layout, filter="data")
        r = t.run([t.crane, "push", layout, f"{reg.addr}/{ref}"], **env)
        if r.returncode != 0 or r.stdout.strip() != f"{reg.addr}/{ref.split(':')[0]}@{digest}":
            raise Bad(f"crane push: exit {r.returncode}, printed {r.stdout.strip()!r}, not {digest}: {r.stderr[-500:]}")
        served, _ = reg.manifest(ref.split(":")[0], ref.split(":")[1], "application/vnd.oci.image.index.v1+json")
        if served != digest:
            raise Bad(f"the registry serves the pushed image as {served}, not the pinned {digest}")
        tgz = glob.glob(os.path.join(d, "charts", "*.tgz"))[0]
        r = t.run([t.helm, "push", tgz, f"oci://{reg.addr}/charts"], **env)
        if r.returncode != 0:
            raise Bad(f"helm push {os.path.basename(tgz)}: {r.stderr.strip()[-500:]}")
        name, version = re.match(r"(.*)-(\d[^/]*)\.tgz$", os.path.basename(tgz)).groups()
        _, chart = reg.manifest(f"charts/{name}", version, "application/vnd.oci.image.manifest.v1+json")
        layers = [x["digest"] for x in chart.get("layers", []) if x["mediaType"].endswith("chart.content.v1.tar+gzip")]
        if layers != ["sha256:" + sha256(tgz)]:
            raise Bad(f"the pushed chart's layers are {layers}, not the .tgz (sha256:{sha256(tgz)})")
        print(f"release: the image pushed as {digest}, the chart as an OCI artifact (oci://{reg.addr}/charts)")
        if sign_key:
            sign_and_verify_image(t, f"{reg.addr}/{ref.split(':')[0]}@{digest}", sign_key, pub, other_pub, env)
    finally:
        reg.stop()


def sign_and_verify_image(t: Tools, image: str, key: str, pub: str, other_pub: str, env: dict) -> None:
    """`cosign sign --key` of the pushed image by digest, no transparency log; `cosign verify --key`."""
    r = t.run([t.cosign, "sign", "--yes", "--key", key, "--tlog-upload=false", image], **env)
    if r.returncode != 0:
        raise Bad(f"cosign sign {image}: {r.stderr.strip()[-800:]}")
    r = t.run([t.cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", image], **env)
    if r.returncode != 0:
        raise Bad(f"cosign verify {image}: {r.stderr.strip()[-800:]}")
    r = t.run([t.cosign, "verify", "--key", other_pub, "--insecure-ignore-tlog=true", image], **env)
    if r.returncode == 0:
        raise Bad(f"cosign verify {image} passed with another key")
    print(f"release: cosign sign --key / verify --key of {image}; another key refused")


def tamperings(d: str, t: Tools, other_key: str):
    """Ways to tamper with a copy of a release, each of which `verify` must refuse."""
    tgz = os.path.relpath(glob.glob(os.path.join(d, "charts", "*.tgz"))[0], d)

    def flip(name: str, offset: int):
        def go():
            with open(os.path.join(d, name), "r+b") as f:
                f.seek(offset, 0 if offset >= 0 else 2)
                b = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([b[0] ^ 0x01]))
        return go

    def flip_layer():
        # One byte in the middle of the first layer blob: the index and its signature are intact.
        with tarfile.open(os.path.join(d, IMAGE)) as tar:
            index = json.loads(tar.extractfile("blobs/sha256/" + pinned_digest(d).split(":")[1]).read())
            manifest = json.loads(tar.extractfile("blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]).read())
            member = tar.getmember("blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1])
        flip(IMAGE, member.offset_data + member.size // 2)()

    def retag():
        p = os.path.join(d, MANIFEST)
        text = open(p).read()
        open(p, "w").write(text.replace(f"{REPO}@{pinned_digest(d)}", f"{REPO}:tampered"))

    def other_digest():
        p = os.path.join(d, MANIFEST)
        text = open(p).read()
        open(p, "w").write(text.replace(pinned_digest(d), "sha256:" + "0" * 64))

    def resign():
        # Signed again, consistently, with a key that is not the release's.
        for blob, sig in [(tgz, tgz + ".sig"), ("SHA256SUMS", "SHA256SUMS.sig")]:
            r = t.run([t.cosign, "sign-blob", "--yes", "--key", other_key, "--tlog-upload=false",
                       "--output-signature", os.path.join(d, sig), os.path.join(d, blob)])
            if r.returncode != 0:
                raise Bad(f"cosign sign-blob with the other key: {r.stderr[-500:]}")

    def resum(mutate):
        # The attacker also rewrites SHA256SUMS: only its signature is left to catch it.
        def go():
            mutate()
            with open(os.path.join(d, "SHA256SUMS")) as f:
                names = [line.split(maxsplit=1)[1].strip() for line in f]
            with open(os.path.join(d, "SHA256SUMS"), "w") as f:
                f.writelines(f"{sha256(os.path.join(d, n))}  {n}\n" for n in names)
        return go

    return [
        ("one byte of the chart changed", [tgz], flip(tgz, 100)),
        ("one byte of SHA256SUMS changed", ["SHA256SUMS"], flip("SHA256SUMS", 3)),
        ("one byte of an image layer blob changed", [IMAGE], flip_layer),
        ("an image tag instead of the digest in the manifest", [MANIFEST], retag),
        ("the manifest pinning another digest", [MANIFEST], other_digest),
        ("the manifest retagged and SHA256SUMS rewritten to match", [MANIFEST, "SHA256SUMS"], resum(retag)),
        ("the chart and SHA256SUMS signed with another key", [tgz + ".sig", "SHA256SUMS.sig"], resign),
    ]


def tampered_copy(d: str, dest: str, changed: list[str]) -> str:
    """A copy of the release by hard links, with real copies of the files about to change."""
    shutil.copytree(d, dest, copy_function=os.link)
    for name in changed:
        os.remove(os.path.join(dest, name))
        shutil.copy2(os.path.join(d, name), os.path.join(dest, name))
    return dest


def throwaway_release(t: Tools, tmp: str, d: str) -> tuple[str, str, str, str, dict]:
    """`make release` of this checkout (the plugin of the debug build) into `d`, signed with a key
    pair made for it, and verified: (key, pub, other_key, other_pub, the release's environment)."""
    keys = os.path.join(tmp, "keys")
    os.makedirs(keys)
    password = "release-self-test"
    t.env["COSIGN_PASSWORD"] = password
    for prefix in ("release", "other"):
        r = t.run([t.cosign, "generate-key-pair", "--output-key-prefix", os.path.join(keys, prefix)])
        if r.returncode != 0:
            raise Bad(f"cosign generate-key-pair: {r.stderr[-500:]}")
    key, pub = os.path.join(keys, "release.key"), os.path.join(keys, "release.pub")
    other_key, other_pub = os.path.join(keys, "other.key"), os.path.join(keys, "other.pub")
    version = "v" + re.search(r'^version = "(.*)"$', open(os.path.join(ROOT, "Cargo.toml")).read(), re.M).group(1)
    env = dict(os.environ, DIST_DIR=d, DIST_TARGETS="host-debug", VERSION=version, COSIGN_KEY=key,
               COSIGN_PASSWORD=password)
    subprocess.run([os.path.join(SCRIPTS, "release.sh")], env=env, check=True)
    verify(t, d, pub, dist_check.all_crates())
    print(f"release: {d}: every signature and digest verifies with the throwaway key")
    return key, pub, other_key, other_pub, env


def self_test(tmp: str) -> None:
    t = Tools(os.path.join(tmp, "home"))
    d = os.path.join(tmp, "dist")
    key, pub, other_key, other_pub, env = throwaway_release(t, tmp, d)
    version = env["VERSION"]
    crates = dist_check.all_crates()
    rehearse_publishing(t, d, os.path.join(tmp, "registry"), key, pub, other_pub)
    bad = subprocess.run([os.path.join(SCRIPTS, "release.sh")], env=dict(env, VERSION=version + "1"),
                         capture_output=True, text=True, timeout=120)
    if bad.returncode == 0 or "bump them first" not in bad.stderr:
        raise Bad(f"release.sh with another VERSION than the tree's was not refused: {bad.stderr[-500:]}")
    print(f"release: refused {bad.stderr.strip().splitlines()[-1]}")
    for i, (what, changed, _) in enumerate(tamperings(d, t, other_key)):
        copy = tampered_copy(d, os.path.join(tmp, f"tampered-{i}"), changed)
        tamperings(copy, t, other_key)[i][2]()
        try:
            verify(t, copy, pub, crates)
        except Bad as e:
            print(f"release: refused {what}: {e}")
        else:
            raise Bad(f"the check passed a release with {what}")
        shutil.rmtree(copy)


def main(argv: list[str]) -> int:
    tmp = tempfile.mkdtemp(prefix="capi-release-check-")
    try:
        if argv == ["--self-test"]:
            self_test(tmp)
        elif len(argv) == 2 and argv[0] == "--throwaway":
            # The release output a user downloads, for docs-check's quick start: kept in argv[1].
            throwaway_release(Tools(os.path.join(tmp, "home")), tmp, os.path.abspath(argv[1]))
        elif len(argv) == 4 and argv[0] == "--dir" and argv[2] == "--key":
            d, key = os.path.abspath(argv[1]), os.path.abspath(argv[3])
            t = Tools(os.path.join(tmp, "home"))
            verify(t, d, key, dist_check.all_crates())
            print(f"release: {d}: every signature and digest verifies with {key}")
            rehearse_publishing(t, d, os.path.join(tmp, "registry"))
        else:
            print("usage: release-check.py --dir DIST_DIR --key COSIGN_PUB | --self-test | --throwaway DIST_DIR",
                  file=sys.stderr)
            return 2
    except Bad as e:
        print(f"FAIL: release: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
