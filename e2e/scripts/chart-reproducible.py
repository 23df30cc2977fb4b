#!/usr/bin/env python3
"""Makes `helm package` and `helm repo index` output reproducible (dist.sh, `make release`).

    chart-reproducible.py package CHART.tgz EPOCH   rewrite the archive: every entry's time EPOCH,
                                                    owner 0/0, the gzip header's time EPOCH
    chart-reproducible.py index INDEX.yaml EPOCH    the index's `created:` and `generated:` times
                                                    set to EPOCH

helm stamps both with the time it runs, so two releases of one commit would differ in the chart's
bytes, its digest in the index, and the checksums and signatures over them. The entries, their
order, contents and modes are kept: helm reads the archive as before. EPOCH is the last commit's
time (SOURCE_DATE_EPOCH), as for the plugin archives.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import tarfile
import time


def package(path: str, epoch: int) -> None:
    out = io.BytesIO()
    with tarfile.open(path, "r:gz") as src, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            member.mtime = epoch
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.pax_headers = {}
            dst.addfile(member, data)
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=epoch) as gz:
        gz.write(out.getvalue())
    os.replace(tmp, path)


def index(path: str, epoch: int) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    text = open(path, encoding="utf-8").read()
    fixed, n = re.subn(r'(?m)^(\s*(?:created|generated):) "?[0-9T:.Z+-]+"?$', rf'\1 "{stamp}"', text)
    if n < 2:
        sys.exit(f"chart-reproducible: {path}: no created and generated times found")
    with open(path, "w", encoding="utf-8") as f:
        f.write(fixed)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("package", "index") or not argv[2].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    (package if argv[0] == "package" else index)(argv[1], int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
