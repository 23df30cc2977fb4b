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


# What `--nonroot-base` adds, as the upstream images' base (gcr.io/distroless/static:nonroot)
# has it: a sticky /tmp and the home of user 65532, which HOME names. Programs that write their
# configuration under $HOME (cluster-api-operator's clusterctl library creates $HOME/.config)
# fail without it, as they would on an image that lacks it.
NONROOT_HOME = "/home/nonroot"
NONROOT_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", f"HOME={NONROOT_HOME}"]


def base_dirs(tar):
    """The directories of `--nonroot-base`; returns their names."""
    made = set()
    for name, mode, owner in (("tmp", 0o1777, 0), ("home", 0o755, 0), (NONROOT_HOME.strip("/"), 0o700, 65532)):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, owner, owner
        tar.addfile(info)
        made.add(name)
    return made


def layer_tar(files, nonroot_base=False):
    """The uncompressed layer: each file with its parent directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = base_dirs(tar) if nonroot_base else set()
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
    p.add_argument("--nonroot-base", action="store_true",
                   help="add distroless/static:nonroot's /tmp, /home/nonroot (uid 65532) and HOME")
    p.add_argument("out")
    a = p.parse_args()
    raw = layer_tar([f.split(":", 1) for f in a.file], a.nonroot_base)
    gz = gzip.compress(raw, compresslevel=a.gzip_level, mtime=0)
    config = json.dumps({
        "architecture": ARCH, "os": "linux",
        "config": {"Entrypoint": [a.entrypoint], "User": a.user, "WorkingDir": "/",
                   **({"Env": NONROOT_ENV} if a.nonroot_base else {})},
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
