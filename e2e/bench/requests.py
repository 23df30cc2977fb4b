#!/usr/bin/env python3
"""The operator's API requests while n providers install (the many-providers scenario of scale.py),
counted by method and resource from its own HTTP client trace (one "requesting" line per request), with the reconcile passes.

Usage: requests.py [N]  (default 10). Breaks the gap to the kubectl floor down request by request.
"""

import collections
import re
import sys

import scale


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    c, op, _, elapsed, _ = scale.operator_many(n, keep=True)
    try:
        log = op.log()
        passes = scale.passes(op)
        counts = collections.Counter()
        for method, path in re.findall(r"http\.method=(\w+) http\.url=\S+?(/apis?/[^ ?}]*)[^\n]*requesting", log):
            parts = [p for p in path.split("/") if p]
            rest = parts[2:] if parts[0] == "api" else parts[3:]
            if len(rest) > 2 and rest[0] == "namespaces":
                rest = rest[2:]
            resource = rest[0] if rest else "(discovery)"
            if len(rest) > 2:
                resource += "/" + rest[2]
            counts[(method, resource)] += 1
        print(f"{n} providers: all Ready after {elapsed:.2f} s, {passes:.0f} reconcile passes, "
              f"{sum(counts.values())} requests ({sum(v for (m, _), v in counts.items() if m != 'GET')} writes)")
        for (method, resource), count in counts.most_common():
            print(f"{count:6d}  {method:6s} {resource}")
    finally:
        op.stop()
        c.down()


if __name__ == "__main__":
    main()
