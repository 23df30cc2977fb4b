#!/usr/bin/env python3
"""Checks the release artifacts e2e/scripts/dist.sh writes (`make dist-check`, a step of `make test`).

Without arguments it runs dist.sh on this machine's debug build (DIST_TARGETS=host-debug: every
packaging step of `make dist`, no release compile) into a temporary directory, then checks it;
`--dir DIR` checks what `make dist` wrote. The checks:

- SHA256SUMS lists every file (but itself and its signature, SHA256SUMS.sig, which `make release`
  adds), and every file has the listed SHA-256;
- each plugin archive unpacks to exactly `kubectl-capi_providers`, executable, built for the
  platform its name says (ELF or Mach-O header); this machine's one runs (`--help`, `--version`
  printing the archive's version);
- the krew manifest (capi-providers.yaml) has one platform per archive, with its SHA-256 and a
  URI ending in its file name, and the plugin's version;
- the chart package renders (`helm template` of the .tgz: the operator's Deployment) and
  charts/index.yaml names it with its digest and version;
- each SBOM (the plugin's, the operator's) parses as CycloneDX JSON describing its crate, and
  lists every crate that crate links (its normal dependencies, from `cargo metadata`) at the
  locked version.

Then it breaks a copy of the artifacts in each of those ways and requires each to be caught, so
the check cannot pass by checking nothing.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(ROOT, "e2e", "scripts")
BIN = "kubectl-capi_providers"
ARCHIVE = re.compile(rf"^{BIN}-(?P<version>[^-]+)-(?P<os>[a-z]+)-(?P<arch>[a-z0-9]+)\.tar\.gz$")
# The crate each SBOM describes: {file: package}.
SBOMS = {"capi-plugin.cdx.json": "capi-plugin", "capi-provider-operator.cdx.json": "capi-provider-operator"}
# ELF e_machine and Mach-O cputype of each arch.
ELF_MACHINE = {"amd64": 0x3E, "arm64": 0xB7}
MACHO_CPU = {"amd64": 0x01000007, "arm64": 0x0100000C}


class Bad(Exception):
    pass


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def host_platform() -> str:
    """This machine as os/arch, the way the archives are named."""
    machine = os.uname().machine
    return f"{sys.platform}/{ {'x86_64': 'amd64', 'aarch64': 'arm64'}.get(machine, machine)}"


def check_sums(d: str) -> None:
    listed = {}
    with open(os.path.join(d, "SHA256SUMS")) as f:
        for line in f:
            digest, name = line.split(maxsplit=1)
            listed[name.strip()] = digest
    files = {os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "**", "*"), recursive=True)
             if os.path.isfile(p) and os.path.relpath(p, d) not in ("SHA256SUMS", "SHA256SUMS.sig")}
    if files != set(listed):
        raise Bad(f"SHA256SUMS lists {sorted(listed)}, the directory holds {sorted(files)}")
    for name, digest in listed.items():
        if sha256(os.path.join(d, name)) != digest:
            raise Bad(f"{name}: SHA-256 differs from SHA256SUMS")


def binary_platform(data: bytes) -> tuple[str, int]:
    if data[:4] == b"\x7fELF":
        return "linux", int.from_bytes(data[18:20], "little")
    if data[:4] == b"\xcf\xfa\xed\xfe":
        return "darwin", int.from_bytes(data[4:8], "little")
    raise Bad("neither an ELF nor a Mach-O binary")


def check_archives(d: str, work: str) -> dict[str, tuple[str, str, str]]:
    """{archive name: (os, arch, version)}; runs this machine's binary."""
    found = {}
    for path in sorted(glob.glob(os.path.join(d, "*.tar.gz"))):
        name = os.path.basename(path)
        m = ARCHIVE.match(name)
        if not m:
            raise Bad(f"{name}: not {BIN}-VERSION-OS-ARCH.tar.gz")
        with tarfile.open(path, "r:gz") as tar:
            members = {x.name: x for x in tar.getmembers()}
            exe_member = members.get(BIN)
            if sorted(members) != sorted([BIN, "LICENSE"]) or not exe_member.isfile() \
                    or exe_member.mode & 0o111 != 0o111:
                raise Bad(f"{name}: holds {[(x.name, oct(x.mode)) for x in members.values()]}, "
                          f"not one executable {BIN} and LICENSE")
            out = os.path.join(work, m["os"], m["arch"])
            tar.extractall(out, filter="data")
        check_license(os.path.join(out, "LICENSE"), name)
        exe = os.path.join(out, BIN)
        with open(exe, "rb") as f:
            os_, machine = binary_platform(f.read(64))
        want = (ELF_MACHINE if os_ == "linux" else MACHO_CPU).get(m["arch"])
        if os_ != m["os"] or machine != want:
            raise Bad(f"{name}: the binary is for {os_} machine {machine:#x}, not {m['os']}/{m['arch']}")
        if f"{m['os']}/{m['arch']}" == host_platform():
            run(exe, m["version"])
        found[name] = (m["os"], m["arch"], m["version"])
    if not found:
        raise Bad("no plugin archive")
    if host_platform() not in {f"{o}/{a}" for o, a, _ in found.values()}:
        raise Bad(f"no archive for this machine ({host_platform()}) to run")
    return found


def check_license(path: str, where: str) -> None:
    """The file at `path` is the repository's LICENSE (Apache-2.0)."""
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        want = f.read()
    with open(path, "rb") as f:
        have = f.read()
    if have != want or b"Apache License" not in have:
        raise Bad(f"{where}: its LICENSE is not the repository's Apache-2.0 licence")


def run(exe: str, version: str) -> None:
    help_ = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    if help_.returncode != 0 or "upgrade" not in help_.stdout:
        raise Bad(f"{exe} --help: exit {help_.returncode}: {help_.stdout[-500:]}{help_.stderr[-500:]}")
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    if ver.returncode != 0 or not re.search(rf"\b{re.escape(version)}\b", ver.stdout):
        raise Bad(f"{exe} --version printed {ver.stdout!r}, not version {version}")


def scalars(lines: list[str]) -> dict[str, str]:
    """`key: value` pairs of YAML lines, wherever nested; folded (`>-`) and quoted values joined."""
    out, i = {}, 0
    while i < len(lines):
        m = re.match(r"^(\s*)(?:- )?([\w.-]+):\s*(.*?)\s*$", lines[i])
        i += 1
        if not m or not m.group(3):
            continue
        key, value = m.group(2), m.group(3)
        if value in (">", ">-", "|", "|-"):
            body = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(m.group(1))):
                body.append(lines[i].strip())
                i += 1
            value = (" " if value.startswith(">") else "\n").join(body)
        out[key] = value.strip("'\"")
    return out


def krew_platforms(text: str) -> list[dict[str, str]]:
    """The platforms of the manifest the plugin prints: the items of `spec.platforms`."""
    m = re.search(r"^  platforms:\n((?:    .*\n|  - .*\n)*)", text, re.M)
    if not m:
        return []
    return [scalars(("  - " + item).splitlines()) for item in re.split(r"^  - ", m.group(1), flags=re.M)[1:]]


def check_krew(d: str, archives: dict[str, tuple[str, str, str]]) -> None:
    text = open(os.path.join(d, "capi-providers.yaml")).read()
    versions = {v for _, _, v in archives.values()}
    if not re.search(r"^kind: Plugin$", text, re.M) or not re.search(r"^  name: capi-providers$", text, re.M):
        raise Bad("capi-providers.yaml is not krew's Plugin capi-providers")
    if not any(re.search(rf"^  version: v{re.escape(v)}$", text, re.M) for v in versions):
        raise Bad(f"capi-providers.yaml does not carry version v{versions}")
    platforms = krew_platforms(text)
    by_platform = {(p.get("os"), p.get("arch")): p for p in platforms}
    if len(platforms) != len(archives) or len(by_platform) != len(archives):
        raise Bad(f"capi-providers.yaml has {len(platforms)} platforms for {len(archives)} archives")
    for name, (os_, arch, _) in archives.items():
        p = by_platform.get((os_, arch))
        if p is None:
            raise Bad(f"capi-providers.yaml has no platform {os_}/{arch}")
        if p.get("sha256") != sha256(os.path.join(d, name)):
            raise Bad(f"capi-providers.yaml: the SHA-256 of {os_}/{arch} is not {name}'s")
        if not p.get("uri", "").endswith("/" + name) or p.get("bin") != BIN:
            raise Bad(f"capi-providers.yaml: {os_}/{arch} points at {p.get('uri')} ({p.get('bin')}), not {name}")


def check_chart(d: str, helm: str) -> None:
    charts = glob.glob(os.path.join(d, "charts", "*.tgz"))
    if len(charts) != 1:
        raise Bad(f"expected one chart package, found {charts}")
    tgz = charts[0]
    r = subprocess.run([helm, "template", "capi-operator", tgz, "-n", "capi-operator-system"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not re.search(r"^kind: Deployment$", r.stdout, re.M):
        raise Bad(f"helm template {os.path.basename(tgz)}: exit {r.returncode}: {r.stderr[-1000:]}")
    with tarfile.open(tgz, "r:gz") as tar, tempfile.TemporaryDirectory() as out:
        lic = [x for x in tar.getmembers() if x.name.endswith("/LICENSE") and x.name.count("/") == 1]
        if len(lic) != 1:
            raise Bad(f"{os.path.basename(tgz)}: no LICENSE at the chart's top")
        tar.extractall(out, members=lic, filter="data")
        check_license(os.path.join(out, lic[0].name), os.path.basename(tgz))
    index = open(os.path.join(d, "charts", "index.yaml")).read()
    version = re.search(r"-(\d[^/]*)\.tgz$", tgz).group(1)
    if f"digest: {sha256(tgz)}" not in index or not re.search(rf"^\s+version: {re.escape(version)}$", index, re.M):
        raise Bad(f"charts/index.yaml does not name {os.path.basename(tgz)} with its digest and version")
    if not re.search(rf"^\s+- \S+/{re.escape(os.path.basename(tgz))}$", index, re.M):
        raise Bad(f"charts/index.yaml has no URL of {os.path.basename(tgz)}")


def linked_crates(package: str) -> set[tuple[str, str]]:
    """(name, version) of `package` and every crate it links on this machine: normal dependencies only."""
    host = re.search(r"^host: (\S+)$", subprocess.run(["rustc", "-vV"], capture_output=True, text=True,
                                                        check=True).stdout, re.M).group(1)
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", host],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    pkgs = {p["id"]: p for p in meta["packages"]}
    start = next(p["id"] for p in meta["packages"] if p["name"] == package)
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for dep in nodes[node]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return {(pkgs[i]["name"], pkgs[i]["version"]) for i in seen}


def all_crates() -> dict[str, set[tuple[str, str]]]:
    """{SBOM file: the crates it must list}."""
    return {name: linked_crates(package) for name, package in SBOMS.items()}


def check_sboms(d: str, crates: dict[str, set[tuple[str, str]]]) -> None:
    for name, want in crates.items():
        check_sbom(d, name, SBOMS[name], want)


def check_sbom(d: str, name: str, package: str, crates: set[tuple[str, str]]) -> None:
    try:
        bom = json.load(open(os.path.join(d, name)))
    except (OSError, json.JSONDecodeError) as e:
        raise Bad(f"{name}: {e}")
    if bom.get("bomFormat") != "CycloneDX" or not str(bom.get("specVersion", "")).startswith("1."):
        raise Bad(f"{name} is not CycloneDX: bomFormat {bom.get('bomFormat')!r}")
    top = bom.get("metadata", {}).get("component", {})
    if top.get("name") != package:
        raise Bad(f"{name} describes {top.get('name')!r}, not {package}")
    listed = set()
    stack = [top, *bom.get("components", [])]
    while stack:
        c = stack.pop()
        listed.add((c.get("name"), c.get("version")))
        stack.extend(c.get("components", []))
    missing = sorted(crates - listed)
    if missing:
        raise Bad(f"{name} lacks {len(missing)} of {package}'s {len(crates)} crates: {missing[:8]}")


def check(d: str, helm: str, crates: dict[str, set[tuple[str, str]]]) -> None:
    with tempfile.TemporaryDirectory() as work:
        check_sums(d)
        archives = check_archives(d, work)
        check_krew(d, archives)
        check_chart(d, helm)
        check_sboms(d, crates)


def breakages(d: str):
    """Ways to break a copy of the artifacts, each of which `check` must catch."""
    archive = sorted(glob.glob(os.path.join(d, "*.tar.gz")))[0]

    def flip_archive():
        with open(archive, "r+b") as f:
            f.seek(-16, 2)
            b = f.read(1)
            f.seek(-16, 2)
            f.write(bytes([b[0] ^ 0xFF]))

    def resum(mutate):
        def go():
            mutate()
            with open(os.path.join(d, "SHA256SUMS")) as f:
                names = [line.split(maxsplit=1)[1].strip() for line in f]
            with open(os.path.join(d, "SHA256SUMS"), "w") as f:
                f.writelines(f"{sha256(os.path.join(d, n))}  {n}\n" for n in names)
        return go

    def edit(name, old, new):
        def go():
            p = os.path.join(d, name)
            text = open(p).read()
            assert re.search(old, text), (name, old)
            open(p, "w").write(re.sub(old, new, text, count=1))
        return go

    def drop_sbom_component():
        p = os.path.join(d, "capi-provider-operator.cdx.json")
        bom = json.load(open(p))
        bom["components"] = [c for c in bom["components"] if c.get("name") != "kube-client"]
        json.dump(bom, open(p, "w"))

    def repack(change):
        def go():
            with tarfile.open(archive, "r:gz") as tar:
                members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
            with tarfile.open(archive, "w:gz") as tar:
                for member, data in members:
                    data = change(member, data)
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
        return go

    def without_exec(member, data):
        if member.name == BIN:
            member.mode = 0o644
        return data

    def other_licence(member, data):
        return b"MIT License\n" if member.name == "LICENSE" else data

    return [
        ("an archive changed after SHA256SUMS", flip_archive),
        ("an archive whose SHA-256 the krew manifest does not carry", resum(flip_archive)),
        ("a binary that is not executable", resum(repack(without_exec))),
        ("an archive with another licence", resum(repack(other_licence))),
        ("a krew manifest pointing at another file", resum(edit("capi-providers.yaml", r"\.tar\.gz", ".zip"))),
        ("a chart index with another digest", resum(edit("charts/index.yaml", r"digest: \w", "digest: x"))),
        ("an operator SBOM without kube-client", resum(drop_sbom_component)),
        ("an SBOM that is not CycloneDX", resum(edit("capi-plugin.cdx.json", r'"CycloneDX"', '"SPDX"'))),
    ]


def main(argv: list[str]) -> int:
    helm = subprocess.run([os.path.join(SCRIPTS, "helm.sh")], capture_output=True, text=True, check=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="capi-dist-check-")
    try:
        if argv[:1] == ["--dir"] and len(argv) == 2:
            d = os.path.abspath(argv[1])
        elif not argv:
            d = os.path.join(tmp, "dist")
            env = dict(os.environ, DIST_DIR=d, DIST_TARGETS="host-debug")
            subprocess.run([os.path.join(SCRIPTS, "dist.sh")], env=env, check=True)
            # Reproducible: a second run, a second later (helm and tar would stamp a new time),
            # writes the same bytes.
            again = os.path.join(tmp, "again")
            time.sleep(1.1)
            subprocess.run([os.path.join(SCRIPTS, "dist.sh")], env=dict(env, DIST_DIR=again), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            first, second = (open(os.path.join(x, "SHA256SUMS")).read() for x in (d, again))
            if first != second:
                diff = sorted(set(second.splitlines()) - set(first.splitlines()))
                raise Bad(f"dist.sh run twice wrote different files: {diff}")
            print("dist: a second run wrote the same bytes (reproducible)")
        else:
            print("usage: dist-check.py [--dir DIST_DIR]", file=sys.stderr)
            return 2
        crates = all_crates()
        check(d, helm, crates)
        print(f"dist: {d}: checksums, {len(glob.glob(os.path.join(d, '*.tar.gz')))} archives, the krew "
              f"manifest, the chart and its index, the SBOMs "
              f"({', '.join(f'{n}: {len(c)} crates' for n, c in crates.items())}) all good")
        for i, (what, _) in enumerate(breakages(d)):
            copy = shutil.copytree(d, os.path.join(tmp, f"broken-{i}"))
            breakages(copy)[i][1]()
            try:
                check(copy, helm, crates)
            except Bad as e:
                print(f"dist: caught {what}: {e}")
            else:
                raise Bad(f"the check passed {what}")
            shutil.rmtree(copy)
    except Bad as e:
        print(f"FAIL: dist: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
