#!/usr/bin/env python3
"""Writes a one-layer OCI image layout as a tar archive, for `ctr images import`.

    oci-image.py --name REF --file SRC:DEST [--file ...] --entrypoint PATH [--user UID] OUT.tar

The real node pulls nothing from outside, so its images (the pause sandbox, the test programs)
are written here from local static binaries: one gzip layer with the files (mode 0755, owner
root), an image config with the entrypoint and user, a manifest and an index.json whose
`io.containerd.image.name` annotation gives the name containerd stores it under. The archive is
byte-for-byte reproducible (zero timestamps), so the same binaries give the same digest. Python's
standard library is all it takes: no tool to build or fetch, where go-containerregistry's crane or
umoci would add a build and a dependency for the same four JSON files.
"""
import argparse
import gzip
import hashlib
import io
import json
import platform
import tarfile

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def layer_tar(files):
    """The uncompressed layer: each file with its parent directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = set()
        for src, dest in files:
            parts = dest.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            with open(src, "rb") as f:
                data = f.read()
            info = tarfile.TarInfo("/".join(parts))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def descriptor(media_type, blob):
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(), "size": len(blob)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="image reference, e.g. registry.k8s.io/pause:3.10")
    p.add_argument("--file", action="append", required=True, metavar="SRC:DEST")
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--user", default="")
    p.add_argument("--gzip-level", type=int, default=9,
                   help="1 for the large manager binaries: a third of the time of 9 for a few per cent more bytes")
    p.add_argument("out")
    a = p.parse_args()
    raw = layer_tar([f.split(":", 1) for f in a.file])
    gz = gzip.compress(raw, compresslevel=a.gzip_level, mtime=0)
    config = json.dumps({
        "architecture": ARCH, "os": "linux",
        "config": {"Entrypoint": [a.entrypoint], "User": a.user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", gz)],
    }, sort_keys=True).encode()
    entry = descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
    entry["platform"] = {"architecture": ARCH, "os": "linux"}
    entry["annotations"] = {"io.containerd.image.name": a.name,
                            "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[-1]}
    index = json.dumps({"schemaVersion": 2, "manifests": [entry]}, sort_keys=True).encode()
    members = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
    members += [("blobs/sha256/" + hashlib.sha256(b).hexdigest(), b) for b in (config, manifest, gz)]
    with tarfile.open(a.out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
