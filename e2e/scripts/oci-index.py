#!/usr/bin/env python3
"""Writes and pushes a multi-platform OCI image (an image index), for the operator's image.

    oci-index.py build --name REF --dockerfile Dockerfile --rootfs ARCH=DIR [--rootfs ...] OUT.tar
    oci-index.py push --registry HOST:PORT --ca CA.crt --user USER:PASSWORD ARCHIVE REPOSITORY:TAG

`build` packs each DIR (a staged root filesystem: the binary, its libraries, CA certificates,
/etc/passwd) as one gzip layer for ARCH, with the image configuration the Dockerfile's last stage
declares: its ENV, USER, ENTRYPOINT and CMD are read from the Dockerfile itself, so the image
`make image` builds and the one `docker build` builds cannot disagree. The archive is an OCI
layout whose index.json names one image index listing a manifest per platform; like
oci-image.py's, it is reproducible (zero timestamps, owner root, sorted entries). `push` uploads
every platform's blobs and manifest, then the index under the tag, with oci-push.py's client.
"""
import argparse
import gzip
import hashlib
import importlib.util
import io
import json
import os
import pathlib
import shlex
import stat
import sys
import tarfile

HERE = pathlib.Path(__file__).resolve().parent
# What the Dockerfile's base (distroless/cc) sets before the Dockerfile's own ENV.
BASE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"]
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def load(name):
    """A sibling script as a module (their names have dashes)."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dockerfile_config(path):
    """Env, User, Entrypoint and Cmd of the Dockerfile's last stage."""
    lines, cur = [], ""
    for raw in pathlib.Path(path).read_text().splitlines():
        t = raw.strip()
        if not cur and (not t or t.startswith("#")):
            continue
        if t.endswith("\\"):
            cur += t[:-1] + " "
            continue
        lines.append(cur + t)
        cur = ""
    stage = []
    for line in lines:
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stage = []
        stage.append((word.upper(), rest.strip()))
    env = list(BASE_ENV)
    config = {"WorkingDir": "/"}
    for word, rest in stage:
        if word == "ENV":
            pairs = shlex.split(rest)
            pairs = pairs if all("=" in p for p in pairs) else [f"{pairs[0]}={' '.join(pairs[1:])}"]
            for pair in pairs:
                env = [e for e in env if e.split("=", 1)[0] != pair.split("=", 1)[0]] + [pair]
        elif word == "USER":
            config["User"] = rest
        elif word in ("ENTRYPOINT", "CMD"):
            config[word.capitalize()] = json.loads(rest)
    config["Env"] = env
    return config


def layer_of(root):
    """The uncompressed layer of directory `root`: modes kept, owner root, no timestamps."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                path = pathlib.Path(dirpath, name)
                info = tarfile.TarInfo(str(path.relative_to(root)))
                st = path.stat()
                info.mode = stat.S_IMODE(st.st_mode)
                if path.is_dir():
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                else:
                    info.size = st.st_size
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
    return buf.getvalue()


def build(a):
    descriptor = load("oci-image").descriptor
    base = dockerfile_config(a.dockerfile)
    blobs, entries = [], []
    for spec in a.rootfs:
        arch, root = spec.split("=", 1)
        raw = layer_of(root)
        gz = gzip.compress(raw, compresslevel=6, mtime=0)
        config = json.dumps({
            "architecture": arch, "os": "linux", "config": base,
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        }, sort_keys=True).encode()
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", gz)],
        }, sort_keys=True).encode()
        entry = descriptor(MANIFEST, manifest)
        entry["platform"] = {"architecture": arch, "os": "linux"}
        entries.append(entry)
        blobs += [config, manifest, gz]
    index = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}, sort_keys=True).encode()
    top = descriptor(INDEX, index)
    top["annotations"] = {"io.containerd.image.name": a.name,
                          "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[-1]}
    blobs.append(index)
    members = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
               ("index.json", json.dumps({"schemaVersion": 2, "manifests": [top]}, sort_keys=True).encode())]
    members += [("blobs/sha256/" + hashlib.sha256(b).hexdigest(), b) for b in blobs]
    with tarfile.open(a.out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    print(top["digest"])


def push(a):
    push_tool = load("oci-push")
    reg = push_tool.Registry(a.registry, a.ca, a.user)
    repo, tag = a.ref.rsplit(":", 1)
    with tarfile.open(a.archive) as tar:
        blob, top = push_tool.layout(tar, a.archive, "oci-index")
        index = blob(top["digest"])
        for entry in json.loads(index)["manifests"]:
            manifest = blob(entry["digest"])
            reg.put_blobs_of(repo, manifest, blob)
            reg.request("PUT", f"/v2/{repo}/manifests/{entry['digest']}", manifest, {"Content-Type": MANIFEST})
    reg.request("PUT", f"/v2/{repo}/manifests/{tag}", index, {"Content-Type": INDEX})
    print(top["digest"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--name", required=True)
    b.add_argument("--dockerfile", required=True)
    b.add_argument("--rootfs", action="append", required=True, metavar="ARCH=DIR")
    b.add_argument("out")
    u = sub.add_parser("push")
    u.add_argument("--registry", required=True)
    u.add_argument("--ca", required=True)
    u.add_argument("--user", required=True)
    u.add_argument("archive")
    u.add_argument("ref")
    a = p.parse_args()
    build(a) if a.cmd == "build" else push(a)


if __name__ == "__main__":
    sys.exit(main())
