#!/usr/bin/env python3
"""Runs every integration-test binary of the workspace in lanes, side by side.

Each crate has one integration-test binary whose tests are grouped in areas (a file of
tests/it/, or a file of one of its directories: node/, net/, root/): an area is the unit
test-support isolates, and its tests never rely on another area's leftovers. This script lists
every binary's tests, makes one job of each area, and runs the jobs in LANES lanes, each lane
with a local control plane of its own (CAPI_TEST_KUBECONFIG): a free lane takes the longest job
left, by the durations the last run recorded. Of the areas named by --node-areas (those that
start clusters with a real node and run real managers: the heaviest), at most --node-lanes run
at once.

Why: the tests spend most of their time waiting on real controllers (one lane keeps a 2-core
machine at a load of about 1.5), so lanes shorten `make integration` without more CPU.

    test-lanes.py [--lanes N] [--node-lanes M] [--node-areas PREFIX ...] [--include-ignored]

The summary lists every area with its duration, its tests passed and ignored (a node area that
took seconds stands out), and the ignored tests with their reason. --include-ignored runs those
too (make passes it where the published files of ../shared are).

Environment: CARGO (default cargo), CAPI_OPERATOR_CACHE (where the durations are kept,
default ~/.cache/capi-provider-operator), TEST_AREA_TIMEOUT (seconds an area may run before it is
killed and failed, default 1800). Exit status 1 when a job failed or could not run.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The longest an area may run (the longest takes about 5 minutes on a loaded 2-core machine).
AREA_TIMEOUT = int(os.environ.get("TEST_AREA_TIMEOUT", "1800"))
ROOT = HERE.parent.parent


def cache_dir():
    if os.environ.get("CAPI_OPERATOR_CACHE"):
        return Path(os.environ["CAPI_OPERATOR_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ["HOME"], ".cache")
    return Path(base) / "capi-provider-operator"


def test_binaries():
    """(name, executable, package dir) of every integration-test binary, built first."""
    cargo = os.environ.get("CARGO", "cargo")
    out = subprocess.run(
        [cargo, "test", "--workspace", "--test", "*", "--no-run", "--message-format=json", "-q"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    found = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        target = msg.get("target") or {}
        if msg.get("reason") != "compiler-artifact" or "test" not in target.get("kind", []):
            continue
        if not msg.get("executable"):
            continue
        pkg = Path(msg["manifest_path"]).parent
        crate = pkg.name
        found.append((f"{crate}/{target['name']}", msg["executable"], pkg, Path(target["src_path"]).parent))
    return sorted(found)


def area_of(test, src_dir):
    """The area of a test: its file's module (two segments for a file in a directory)."""
    parts = test.split("::")[:-1]
    if not parts:
        return "(top)"
    if len(parts) >= 2 and (src_dir / parts[0]).is_dir():
        return "::".join(parts[:2])
    return parts[0]


def jobs_of(binaries):
    jobs = []
    for name, exe, pkg, src_dir in binaries:
        listed = subprocess.run(
            [exe, "--list", "--format", "terse"], cwd=pkg, check=True,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, CARGO_MANIFEST_DIR=str(pkg)),
        ).stdout
        areas = {}
        for line in listed.splitlines():
            if line.endswith(": test"):
                test = line[: -len(": test")]
                areas.setdefault(area_of(test, src_dir), []).append(test)
        for area, tests in sorted(areas.items()):
            jobs.append({"key": f"{name} {area}", "area": area, "exe": exe, "pkg": pkg, "tests": tests})
    return jobs


class Lanes:
    def __init__(self, jobs, node_areas, node_lanes, times, kubeconfigs, logdir, extra_args):
        self.lock = threading.Lock()
        self.extra_args = extra_args
        self.node_areas = node_areas
        # Without a recorded duration (a first run), the node areas, the longest as a rule, first.
        self.pending = sorted(jobs, key=lambda j: -times.get(j["key"], 20_000 if self.is_node(j) else 10_000))
        self.node_free = node_lanes
        self.results = []
        self.kubeconfigs = kubeconfigs
        self.logdir = logdir
        self.children = set()
        self.stopping = False

    def is_node(self, job):
        return any((job["area"] + "::").startswith(p) for p in self.node_areas)

    def take(self):
        with self.lock:
            for i, job in enumerate(self.pending):
                if self.is_node(job):
                    if self.node_free == 0:
                        continue
                    self.node_free -= 1
                return self.pending.pop(i)
            return None

    def run_lane(self, lane):
        while not self.stopping:
            job = self.take()
            if job is None:
                # Only node areas are left and none may start yet: wait for a node lane.
                with self.lock:
                    if not self.pending:
                        return
                time.sleep(0.5)
                continue
            self.run_job(lane, job)
            if self.is_node(job):
                with self.lock:
                    self.node_free += 1

    def run_job(self, lane, job):
        log = self.logdir / f"{job['key'].replace('/', '_').replace(' ', '_').replace(':', '_')}.log"
        env = dict(os.environ, CAPI_TEST_KUBECONFIG=self.kubeconfigs[lane],
                   CARGO_MANIFEST_DIR=str(job["pkg"]))
        start = time.monotonic()
        with open(log, "w") as out:
            child = subprocess.Popen(
                [job["exe"], "--exact", *self.extra_args, *job["tests"]], cwd=job["pkg"], env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
            with self.lock:
                self.children.add(child)
            try:
                rc = child.wait(timeout=AREA_TIMEOUT)
            except subprocess.TimeoutExpired:
                # A hung area (a wait without a deadline) must fail the run, not hold it until
                # CI's limit.
                os.killpg(child.pid, signal.SIGKILL)
                rc = child.wait()
                out.write(f"\ntest-lanes: killed after {AREA_TIMEOUT} s (TEST_AREA_TIMEOUT)\n")
            with self.lock:
                self.children.discard(child)
        took = time.monotonic() - start
        text = log.read_text(errors="replace")
        job["counts"] = test_counts(text)
        with self.lock:
            self.results.append((job, rc, took))
            verdict = "ok" if rc == 0 else f"FAILED (exit {rc})"
            print(f"=== lane {lane}: {job['key']} ({len(job['tests'])} tests): {verdict} in {took:.0f} s", flush=True)
            print(text, end="" if text.endswith("\n") else "\n", flush=True)

    def kill_all(self):
        self.stopping = True
        with self.lock:
            for child in self.children:
                try:
                    os.killpg(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def start_clusters(n, base):
    """n local control planes started side by side; they stop when this process exits."""
    procs = [
        subprocess.Popen(
            [str(HERE / "cluster-up.sh"), "--dir", f"{base}-{i}", "--watch-pid", str(os.getpid())],
            stdout=subprocess.PIPE, text=True,
        )
        for i in range(n)
    ]
    kubeconfigs = []
    for i, p in enumerate(procs):
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"test-lanes: the control plane of lane {i} did not start (exit {p.returncode})")
        kubeconfigs.append(out.strip().splitlines()[-1])
    return kubeconfigs


def test_counts(text):
    """(passed, ignored) of libtest's last result line in an area's output."""
    m = None
    for m in re.finditer(r"test result: \w+\. (\d+) passed; \d+ failed; (\d+) ignored", text):
        pass
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def ignored_tests(jobs):
    """`binary test: reason` of every #[ignore]d test of the jobs' binaries."""
    out = []
    for exe, pkg in sorted({(j["exe"], str(j["pkg"])) for j in jobs}):
        listed = subprocess.run([exe, "--list", "--ignored", "--format", "terse"], cwd=pkg,
                                stdout=subprocess.PIPE, text=True, check=False).stdout
        for line in listed.splitlines():
            if line.endswith(": test"):
                out.append(f"{Path(exe).name.rsplit('-', 1)[0]} {line[:-len(': test')]}")
    if out:
        out.append("(ignored tests compare with the published files of ../shared: make test runs them where those are)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lanes", type=int, default=3)
    ap.add_argument("--node-lanes", type=int, default=1, help="node areas run at once, at most")
    ap.add_argument("--node-areas", nargs="*", default=[], help="area prefixes, e.g. node::")
    ap.add_argument("--include-ignored", action="store_true", help="run the #[ignore]d tests too")
    args = ap.parse_args()
    lanes = max(1, args.lanes)

    jobs = jobs_of(test_binaries())
    times_file = cache_dir() / "test-times.json"
    try:
        times = json.loads(times_file.read_text())
    except (OSError, json.JSONDecodeError):
        times = {}

    work = Path(tempfile.mkdtemp(prefix="capi-lanes-"))
    base = str(work / "cluster")
    kubeconfigs = start_clusters(lanes, base)
    logdir = work / "logs"
    logdir.mkdir()
    state = Lanes(jobs, args.node_areas, max(1, args.node_lanes), times, kubeconfigs, logdir,
                  ["--include-ignored"] if args.include_ignored else [])
    print(f"test-lanes: {len(jobs)} areas of {sum(len(j['tests']) for j in jobs)} tests in {lanes} lanes", flush=True)

    started = time.monotonic()
    threads = [threading.Thread(target=state.run_lane, args=(i,)) for i in range(lanes)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        state.kill_all()
        for t in threads:
            t.join()
        raise
    finally:
        for i in range(lanes):
            subprocess.run([str(HERE / "cluster-down.sh"), "--dir", f"{base}-{i}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(work, ignore_errors=True)

    failed = [j["key"] for j, rc, _ in state.results if rc != 0]
    for job, rc, took in state.results:
        times[job["key"]] = round(took, 1)
    try:
        times_file.parent.mkdir(parents=True, exist_ok=True)
        times_file.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        print(f"test-lanes: durations not kept: {e}", file=sys.stderr)

    print(f"\n=== test-lanes: {len(state.results)} areas in {time.monotonic() - started:.0f} s "
          "(duration, passed, ignored; * a real-node area):")
    for job, rc, took in sorted(state.results, key=lambda r: -r[2]):
        passed, ignored = job.get("counts", (0, 0))
        node = "*" if state.is_node(job) else " "
        print(f"  {took:6.0f} s {node} {passed:3d} passed {ignored:3d} ignored  {job['key']}"
              f"{'' if rc == 0 else '  FAILED'}")
    if not args.include_ignored:
        for line in ignored_tests(jobs):
            print(f"  ignored: {line}")
    if failed:
        print("=== test-lanes: FAILED: " + ", ".join(failed))
        return 1
    print("=== test-lanes: every area passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
