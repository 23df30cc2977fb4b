#!/usr/bin/env python3
"""Runs every command the README and docs/ show, as written (`make docs-check`, part of `make test`).

Every fenced ``sh`` block of README.md, docs/*.md and examples/**/README.md must be preceded by a
directive in an HTML comment (invisible when rendered):

    <!-- check: run needs=cluster,operator expect="^ok$" -->
    <!-- check: run needs=fresh exclude="make test" why="the CI command that runs this check" -->
    <!-- check: skip why="..." -->

The block is then run with bash (`set -euo pipefail`) from the repository root, after the
harness has made what `needs` names exist:

    fresh        no cluster: stop whatever the harness or an earlier block started
    cluster      the local control plane (`make cluster-up` in a private CAPI_CLUSTER_DIR), KUBECONFIG set
    crds         the provider CRDs (manifests/crds)
    cert-manager cert-manager's CRDs (of the cert-manager `make providers` builds), as Cluster API
                 releases expect
    github       a local GitHub-compatible server (capi-fake-github) serving the real Cluster API
                 releases as kubernetes-sigs/cluster-api; CAPI_PROVIDERS_GITHUB_API_URL points at it
    operator     the operator running against the cluster (`capi-provider-operator run`), with the
                 provider CRDs and, when `github` is up, `--github-api-url` pointing at it
    releases     `releases/` in the repository root: the Cluster API releases in clusterctl's layout
                 (`releases/<provider>/<version>/<file>`), as a user who downloaded them has; here the
                 ones `make providers` assembles (a link, removed after the block)
    real-node-release
                 the user's path from the release output alone (needs root): a cluster whose pods
                 run on the real node (cluster-up.sh --real-node, its taint lifted, the kwok node
                 cordoned), the release output copied into an empty directory that is the block's
                 working directory, PATH holding only kubectl, helm and the system's tools, and
                 ghcr.io, github.com and api.github.com served locally over TLS
                 (e2e/scripts/public-hosts.py): the block runs in a mount namespace of its own
                 whose /etc/hosts names them, with SSL_CERT_FILE trusting their CA

`after=down` says the block stops the cluster itself. `expect` is a regular expression the
output must match. `exclude` drops the lines starting with that command, which `why` must cover.
`label=NAME` names a block; `steps=NAME,.,NAME` runs the named blocks of the same document and
this one (`.`) as one script, in that order (a block that is an alternative to another one).

Every document starts on a fresh cluster. Inline commands (`make help`, ...) outside the blocks
are checked too: each is run here, is a line of a block that ran, or is listed in INLINE with
what covers it. A block without a directive, or an inline command nobody covers, fails the check.
Files a block creates in the repository (core.yaml, ...) are removed afterwards.

`docs-check.py FILE...` checks only those documents (while editing them).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(ROOT, "e2e", "scripts")
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/capi-provider-operator/target")
BIN = os.path.join(TARGET, "debug")
BLOCK_TIMEOUT = 900
# Where the blocks that need `releases` find them, as a user who downloaded them would.
RELEASES_LINK = os.path.join(ROOT, "releases")

# Inline commands that are not lines of a block: what runs them. "run" entries are run here
# as written; the others name the test or the recorded run that covers them.
INLINE = {
    "make help": ("run", None),
    "make gitops": ("run", None),
    "make chart-readme": ("run", None),
    "cargo fmt --check": ("covered", "a step of make test (fmt-check)"),
    "helm install": ("covered", "the chart blocks of the README and docs/operating.md run it (as $helm install); crates/operator/tests/it/production.rs too"),
    "helm upgrade": ("covered", "docs/operating.md's chart block runs it (as $helm upgrade); crates/operator/tests/it/production.rs too"),
    "helm package": ("covered", "e2e/scripts/dist.sh, which make dist-check (a step of make test) runs"),
    "helm repo index": ("covered", "e2e/scripts/dist.sh, which make dist-check (a step of make test) runs"),
    "helm template": ("covered", "e2e/scripts/dist-check.py renders the packaged chart with it"),
    "cargo metadata": ("name", "e2e/scripts/dist-check.py reads the plugin's crates from it"),
    "cargo zigbuild": ("covered", "e2e/scripts/dist.sh runs it in make dist (by hand); docs/development.md says what it gives"),
    "cargo build --release -p capi-plugin --target x86_64-unknown-linux-gnu": (
        "covered", "e2e/scripts/dist.sh runs it in make dist (by hand)"),
    "helm uninstall": ("covered", "crates/operator/tests/it/production.rs (helm_install_upgrade_and_values_schema)"),
    "capi-provider-operator run --help": ("run", None),
    "cargo build -p capi-plugin": ("run", None),
    "kubectl api-resources --categories capi-providers": ("run", ["crds"]),
    "make docs-check": ("covered", "this check"),
    "make docs-book": ("covered", "a step of make test"),
    "make docs-serve": ("covered", "serves the book make docs-book builds and checks in make test"),
    "make dist": ("covered", "by hand (release builds for four platforms); make dist-check, a step of make test, runs its packaging on the debug build"),
    "make dist-check": ("covered", "a step of make test"),
    "make release": ("covered", "by hand, with the release key; make release-self-test (a step of make test) runs e2e/scripts/release.sh and its check with a throwaway key"),
    "make release VERSION=vX.Y.Z": ("covered", "by hand, with the release key; make release-self-test (a step of make test) runs e2e/scripts/release.sh and its check with a throwaway key"),
    "make release-check": ("covered", "make release runs it; make release-self-test (a step of make test) runs the same check"),
    "make release-self-test": ("covered", "a step of make test"),
    "kubectl kustomize": ("covered", "e2e/scripts/release.sh renders the release manifest with it (make release-self-test, a step of make test)"),
    "helm push": ("covered", "e2e/scripts/release-check.py pushes the chart to a local registry with it (make release-self-test, a step of make test)"),
    "make unit": ("covered", "a step of make test (the reconcile scenarios run there)"),
    "make clippy": ("covered", "a step of make test"),
    "make advisories": ("covered", "by hand: the RustSec database comes from GitHub, which make test (offline) cannot reach; e2e/scripts/advisories.sh fails when it cannot get it"),
    "cargo fmt": ("covered", "make fmt-check, a step of make test, runs cargo fmt --check"),
    "cargo bench -p capi-components --bench render": ("covered", "a step of make bench (run by hand); its figures are in docs/performance.md and docs/architecture.md"),
    "cargo build --locked --release -p capi-provider-operator --bin capi-provider-operator": ("covered", "the measurement's build, by hand; e2e/scripts/operator-image.sh (make image, a step of make test) makes the same release build for the image's two platforms"),
    "cargo rustc ... -- -C link-arg=-Wl,-Map=FILE": ("covered", "by hand: the linker map the binary-size table was read from (an outline, not a command to paste)"),
    "cargo tree -d -e normal": ("covered", "by hand; make clippy (a step of make test) runs cargo-deny's bans check, which fails on a duplicate version deny.toml does not list"),
    "cargo bench -p capi-provider-operator --bench index": ("covered", "a step of make bench (run by hand); its figures are on that page"),
    "cargo build --locked --workspace --all-targets": ("covered", "the Makefile's BUILD: make test runs it in check-generated, and this check before its blocks"),
    "kubectl capi-providers": ("name", "the plugin; its block in docs/plugin.md runs it"),
    "kubectl capi-providers preload": ("name", "the subcommand; its block in docs/user-guide.md runs it"),
    "make docs": ("run-then-diff", "docs/api-reference.md"),
    "make crds": ("run-then-diff", "manifests/crds"),
    "make test": ("covered", "the CI command (.ci/run); this check is one of its steps"),
    "make fuzz-short": ("covered", "a step of make test"),
    "make fuzz": ("covered", "long run, by hand; results and dates in docs/hardening.md"),
    "make soak": ("covered", "long run, by hand; results and dates in docs/hardening.md"),
    "make soak SOAK_RUNS=25 SOAK_SEED=4242": ("covered", "run by hand; results in docs/hardening.md"),
    "make bench": ("covered", "run by hand; figures and dates in docs/performance.md and the development guide's Benchmarks"),
    "docker build -t capi-provider-operator:dev .": (
        "covered",
        "not run: no container runtime on the CI machines; crates/operator/tests/it/root/image.rs checks "
        "the Dockerfile and runs the binary as the image's Deployment would",
    ),
    "capi-provider-operator render": ("name", "the subcommand; its block runs below it"),
    "capi-provider-operator run": ("name", "the subcommand; make demo runs it"),
    "capi-provider-operator api-docs": ("name", "the subcommand behind make docs"),
    "kubectl capi-providers migrate": ("name", "crates/plugin/tests/it/e2e_migrate.rs"),
    "kubectl capi-providers migrate --from cluster-api-operator": (
        "covered",
        "crates/operator/tests/it/node/handover_from_go_operator.rs runs it against the real cluster-api-operator",
    ),
    "kubectl capi-providers migrate --from cluster-api-operator --dry-run": (
        "covered",
        "crates/operator/tests/it/node/handover_from_go_operator.rs runs it and checks that nothing changed",
    ),
    "kubectl get coreproviders": ("run", ["crds"]),
    "kubectl wait": ("name", "named as a tool that waits on conditions; the blocks run kubectl wait"),
    "kubectl get --watch": ("name", "named as how the benchmarks time both sides; e2e/bench/common.py (Watch) runs it"),
    "make providers": ("run", None),
    "make images": ("run", None),
    "cargo test -p capi-provider-operator --test it node::image_pull": (
        "covered", "make integration runs the node:: areas (a step of make test)"),
    "make demo-real": ("covered", "needs root and minutes: run by hand (its times are in the README); its dry run, e2e/scripts/demo-real.sh --dry-run, is a block of docs/user-guide.md run here, and crates/operator/tests/it/node/operator_image.rs installs the same chart and real providers on the real node"),
    "make image": ("covered", "a prerequisite of make integration, a step of make test"),
    "make check-generated": ("covered", "a step of make test"),
    "helm push": ("covered", "the real-node-release need of this check pushes the chart with it (e2e/scripts/public-hosts.py)"),
    "kubectl apply -k": ("covered", "crates/operator/tests/it/node/operator_image.rs applies an overlay of manifests/ on the real node"),
    "make integration": ("covered", "a step of make test"),
    "make long-checks": ("covered", "a step of make test"),
    "make real-node-check": ("covered", "a step of make test"),
    "helm lint": ("covered", "crates/operator/tests/it/node/helm_chart.rs runs helm lint --strict with every chart value in node::operator_image (make integration, a step of make test)"),
    "cargo test ... node::workload_cluster": ("covered", "make integration runs the node:: areas (a step of make test)"),
    "kubectl get clusters,machines -A": ("covered", "e2e/scripts/demo-real.sh runs it as its last step (make demo-real: by hand, needs root and minutes)"),
    "kubectl logs": ("name", "named as how a pod's output on the real node is read; e2e/scripts/real-node-check.sh reads a pod's output with it"),
    "kubectl describe deployment -n <ns>": ("template", "kubectl describe deployment -n kube-system"),
    "kubectl describe": ("name", "named as where the condition messages are read; crates/operator/tests/it/gitops_health.rs reads the same status (the Summary column) with kubectl get"),
    "kubectl edit": ("name", "named as a way to change an installed object; drift repair is tested in crates/operator/tests/it/behaviour.rs and clusterctl.rs (DriftRepaired)"),
    "kubectl scale": ("name", "named as a way to change an installed object; clusterctl.rs scales a Deployment down through the real clusterctl and checks the DriftRepaired event"),
}
INLINE_PREFIX = re.compile(r"^(make|kubectl|cargo|capi-provider-operator|helm|docker|bash|python3)\s")
DOCS = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + sorted(
    glob.glob(os.path.join(ROOT, "examples", "**", "README.md"), recursive=True)
)
DIRECTIVE = re.compile(r"^<!--\s*check:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```\s*([A-Za-z]*)\s*$")
SHELL_LANGS = {"sh", "bash", "shell", "console"}


class Failure(Exception):
    pass


def say(msg: str) -> None:
    print(f"\n\033[1m== {msg}\033[0m", flush=True)


def parse_blocks(path: str):
    """(line number, directive text or None, code) of every shell block of `path`."""
    blocks = []
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if lang in SHELL_LANGS:
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            d = DIRECTIVE.match(lines[k]) if k >= 0 else None
            blocks.append((start + 1, d.group(1) if d else None, "\n".join(lines[start + 1 : j]) + "\n"))
        i = j + 1
    return blocks


def parse_directive(text: str) -> dict:
    words = shlex.split(text)
    if not words or words[0] not in ("run", "skip"):
        raise Failure(f"directive must start with run or skip: {text!r}")
    d = {"action": words[0], "needs": [], "expect": None, "exclude": None, "why": None, "after": None,
         "label": None, "steps": None}
    for w in words[1:]:
        key, _, value = w.partition("=")
        if key == "needs":
            d["needs"] = [n for n in value.split(",") if n]
        elif key in ("expect", "exclude", "why", "after", "label", "steps"):
            d[key] = value
        else:
            raise Failure(f"unknown directive key {key!r} in {text!r}")
    unknown = set(d["needs"]) - {"fresh", "cluster", "crds", "cert-manager", "github", "operator", "releases",
                                 "real-node-release"}
    if unknown:
        raise Failure(f"unknown needs {sorted(unknown)} in {text!r}")
    if d["action"] == "skip" and not d["why"]:
        raise Failure(f"skip needs a why: {text!r}")
    if d["exclude"] and not d["why"]:
        raise Failure(f"exclude needs a why: {text!r}")
    return d


def command_lines(code: str):
    """The commands of a block: its lines without comments, heredoc bodies and continuations."""
    out, heredoc, joined = [], None, ""
    for line in code.splitlines():
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        joined += stripped
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        m = re.search(r"<<-?'?(\w+)'?", joined)
        if m:
            heredoc = m.group(1)
        out.append(" ".join(re.sub(r"\s+#.*$", "", joined).split()))
        joined = ""
    return out


def release_output(dest: str) -> str:
    """The release output the user's path starts from: `make release` of this checkout (the plugin
    of the debug build, the image `make image` built), signed with a throwaway key and verified."""
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "release-check.py"), "--throwaway", dest],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"make release of this checkout failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return dest


class Harness:
    def __init__(self, releases: str, cert_manager: str, clusterctl_dir: str):
        self.tmp = tempfile.mkdtemp(prefix="capi-docs-check-")
        self.providers = os.path.dirname(clusterctl_dir)
        self.cluster_dir = os.path.join(self.tmp, "cluster")
        self.releases = releases
        self.cert_manager_crds = os.path.join(self.tmp, "cert-manager-crds.yaml")
        with open(cert_manager, encoding="utf-8") as f:
            docs = [d for d in f.read().split("\n---") if re.search(r"(?m)^kind: CustomResourceDefinition\s*$", d)]
        if not docs:
            raise Failure(f"{cert_manager} holds no CustomResourceDefinition")
        with open(self.cert_manager_crds, "w", encoding="utf-8") as f:
            f.write("\n---".join(docs))
        self.kubectl_dir = subprocess.run(
            [os.path.join(SCRIPTS, "build.sh")], check=True, capture_output=True, text=True
        ).stdout.strip()
        self.env = dict(os.environ)
        self.env.update(
            {
                "CAPI_CLUSTER_DIR": self.cluster_dir,
                "CARGO_TARGET_DIR": TARGET,
                # clusterctl as a user has it on PATH: the v1.12.0 make providers builds.
                "PATH": os.pathsep.join([BIN, self.kubectl_dir, clusterctl_dir, os.environ.get("PATH", "")]),
            }
        )
        # As at a terminal: no outer make's flags ("Entering directory"), no credentials.
        for k in ("KUBECONFIG", "CAPI_PROVIDERS_GITHUB_API_URL", "GITHUB_TOKEN", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
            self.env.pop(k, None)
        self.state: set[str] = set()
        self.work: str | None = None
        self.release: str | None = None
        self.user_env: dict[str, str] = {}

    def sh(self, cmd: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=ROOT, env=self.env, **kw)

    def block(self, cmd: str, needs: list[str], **kw) -> subprocess.CompletedProcess:
        """A block of the docs; one that needs `real-node-release` runs as a user's shell would:
        in the directory holding the release output, with the public names served locally."""
        if "real-node-release" not in needs:
            return self.sh(cmd, **kw)
        # /etc/hosts changes for the block only: a mount namespace of its own (private mounts).
        argv = ["unshare", "--mount", "bash", "-c", 'mount --bind "$1" /etc/hosts && exec bash -euo pipefail -c "$2"',
                "-", os.path.join(self.cluster_dir, "public-hosts", "hosts"), cmd]
        return subprocess.run(argv, cwd=self.work, env=self.user_env, **kw)

    def kubectl(self, *args: str) -> None:
        subprocess.run(["kubectl", *args], env=self.env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)

    def down(self) -> None:
        subprocess.run([os.path.join(SCRIPTS, "cluster-down.sh"), "--dir", self.cluster_dir], env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.env.pop("KUBECONFIG", None)
        self.env.pop("CAPI_PROVIDERS_GITHUB_API_URL", None)
        self.state.clear()
        if self.work:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def background(self, name: str, argv: list[str]) -> subprocess.Popen:
        """A process the cluster directory's pid files name, so `make cluster-down` stops it too."""
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        p = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=log, text=True,
                             start_new_session=True, cwd=ROOT)
        with open(os.path.join(self.cluster_dir, f"docs-check-{name}.pid"), "w") as f:
            f.write(str(p.pid))
        return p

    def ensure(self, needs: list[str]) -> None:
        if "fresh" in needs:
            self.down()
        if "real-node-release" in needs:
            self.real_node_release()
        if "operator" in needs:
            needs = ["crds", *needs]
        if "releases" in needs and not os.path.lexists(RELEASES_LINK):
            os.symlink(self.releases, RELEASES_LINK)
        wanted = [n for n in ("cluster", "crds", "cert-manager", "github", "operator") if n in needs]
        if wanted and wanted[0] != "cluster":
            wanted.insert(0, "cluster")
        for n in wanted:
            if n in self.state:
                continue
            if n == "cluster":
                kc = self.sh("make -s cluster-up", capture_output=True, text=True, check=True).stdout
                self.env["KUBECONFIG"] = kc.strip().splitlines()[-1]
            elif n == "cert-manager":
                self.kubectl("apply", "--server-side", "-f", self.cert_manager_crds)
            elif n == "github":
                p = self.background("github", [
                    os.path.join(BIN, "capi-fake-github"), "--dir",
                    self.releases, "--repo",
                    "kubernetes-sigs/cluster-api=cluster-api,bootstrap-kubeadm,control-plane-kubeadm",
                    "--repo", "example-org/cluster-api-fork=cluster-api",
                ])
                url = p.stdout.readline().strip() if p.stdout else ""
                if not url.startswith("http"):
                    raise Failure(f"capi-fake-github did not start (log {self.tmp}/github.log)")
                self.env["CAPI_PROVIDERS_GITHUB_API_URL"] = url
            elif n == "crds":
                self.kubectl("apply", "--server-side", "-f", os.path.join(ROOT, "manifests", "crds"))
                self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f",
                             os.path.join(ROOT, "manifests", "crds"))
            elif n == "operator":
                argv = [os.path.join(BIN, "capi-provider-operator"), "run"]
                if "github" in self.state:
                    argv += ["--github-api-url", self.env["CAPI_PROVIDERS_GITHUB_API_URL"]]
                self.background("operator", argv)
            self.state.add(n)

    def real_node_release(self) -> None:
        """The cluster of `real-node-release`, the staged release output and the public hosts."""
        if "real-node-release" in self.state:
            return
        if os.geteuid() != 0:
            raise Failure("needs=real-node-release needs root (the real node: containerd, kubelet, namespaces)")
        self.down()
        if self.release is None:
            self.release = release_output(os.path.join(self.tmp, "release"))
        kc = subprocess.run([os.path.join(SCRIPTS, "cluster-up.sh"), "--dir", self.cluster_dir, "--real-node"],
                            env=self.env, stdout=subprocess.PIPE, text=True, check=True).stdout
        self.env["KUBECONFIG"] = kc.strip().splitlines()[-1]
        # Pods land on the real node as on a user's cluster, with no node selector or toleration:
        # its taint lifted, the fake kwok node (whose pods only seem to run) cordoned.
        self.kubectl("taint", "node", "real-node", "capi-provider-operator.dev/real-node-")
        self.kubectl("cordon", "kwok-node-0")
        self.work = tempfile.mkdtemp(prefix="capi-user-path-")
        shutil.copytree(self.release, self.work, dirs_exist_ok=True)
        ports = dict(line.split("=", 1) for line in open(os.path.join(self.cluster_dir, "ports.env")).read().split())
        helm = subprocess.run([os.path.join(SCRIPTS, "helm.sh")], check=True, capture_output=True,
                              text=True).stdout.strip()
        p = self.background("public-hosts", [
            sys.executable, os.path.join(SCRIPTS, "public-hosts.py"), "--dist", self.release,
            "--cluster-dir", self.cluster_dir, "--node-ip", ports["REAL_NODE_HOST_IP"],
            "--providers", self.providers, "--helm", helm, "--kubectl", os.path.join(self.kubectl_dir, "kubectl"),
        ])
        if (p.stdout.readline().strip() if p.stdout else "") != "ready":
            raise Failure(f"public-hosts.py did not start (log {self.tmp}/public-hosts.log)")
        home = os.path.join(self.tmp, "home")
        shutil.rmtree(home, ignore_errors=True)
        os.makedirs(home)
        # Nothing of the clone: kubectl and helm, the system's tools, a new home.
        self.user_env = {
            "PATH": os.pathsep.join([os.path.dirname(helm), self.kubectl_dir, "/usr/sbin:/usr/bin:/sbin:/bin"]),
            "HOME": home, "KUBECONFIG": self.env["KUBECONFIG"], "LANG": "C.UTF-8",
            "SSL_CERT_FILE": os.path.join(self.cluster_dir, "public-hosts", "ca-bundle.crt"),
        }
        self.state.update({"cluster", "real-node-release"})

    def untracked(self) -> set[str]:
        r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                           capture_output=True, text=True)
        return {line[3:] for line in r.stdout.splitlines() if line.startswith("?? ")}


def labels(blocks) -> dict[str, str]:
    """The code of each block of a document named with `label=`."""
    out = {}
    for _, directive, code in blocks:
        try:
            d = parse_directive(directive) if directive else None
        except Failure:
            continue
        if d and d["label"]:
            out[d["label"]] = code
    return out


def self_test() -> None:
    """The parser on a known text, so a broken parser cannot pass by finding nothing."""
    text = (
        "intro\n\n```sh\nmake a\n```\n\n<!-- check: run needs=cluster expect=\"^ok\" -->\n"
        "```sh\ncat > f <<'YAML'\nkind: X\nYAML\nkubectl get \\\n  pods   # all\n```\n```yaml\nk: v\n```\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write(text)
    try:
        blocks = parse_blocks(f.name)
    finally:
        os.remove(f.name)
    assert [(b[0], b[1]) for b in blocks] == [(3, None), (8, 'run needs=cluster expect="^ok"')], blocks
    assert command_lines(blocks[1][2]) == ["cat > f <<'YAML'", "kubectl get pods"], command_lines(blocks[1][2])
    d = parse_directive(blocks[1][1])
    assert d["needs"] == ["cluster"] and d["expect"] == "^ok", d
    d = parse_directive("run needs=fresh,real-node-release label=a steps=a,.")
    assert d["needs"] == ["fresh", "real-node-release"] and (d["label"], d["steps"]) == ("a", "a,."), d
    assert labels(blocks + [(9, "run label=x", "echo x\n")]) == {"x": "echo x\n"}
    for bad in ("walk", "run needs=moon", "skip", "run exclude=x"):
        try:
            parse_directive(bad)
        except Failure:
            continue
        raise AssertionError(f"directive {bad!r} accepted")


def main() -> int:
    self_test()
    # What make providers built (cached: instant); the Makefile builds it before this check.
    images = subprocess.run([os.path.join(SCRIPTS, "build-providers.sh")], check=True,
                            capture_output=True, text=True).stdout.strip().splitlines()[-1]
    releases = os.path.join(os.path.dirname(images), "releases")
    cert_manager = os.path.join(os.path.dirname(images), "cert-manager-v1.11.5", "cert-manager.yaml")
    if os.path.lexists(RELEASES_LINK):
        print(f"{RELEASES_LINK} exists: move it away (docs-check links the releases there)", file=sys.stderr)
        return 2

    # The same invocation as the Makefile's builds, so nothing is compiled again.
    say("cargo build --locked --workspace --all-targets")
    subprocess.run(["cargo", "build", "-q", "--locked", "--workspace", "--all-targets"], cwd=ROOT, check=True,
                   env=dict(os.environ, CARGO_TARGET_DIR=TARGET))
    only = {os.path.relpath(os.path.abspath(a), ROOT) for a in sys.argv[1:]}
    docs = [d for d in DOCS if not only or os.path.relpath(os.path.join(ROOT, d), ROOT) in only]
    if only and len(docs) != len(only):
        print(f"unknown documents: {sorted(only)}; known: {DOCS}", file=sys.stderr)
        return 2
    h = Harness(releases, cert_manager, os.path.join(os.path.dirname(images), "cluster-api-v1.12.0"))
    failures: list[str] = []
    ran_lines: set[str] = set()
    covered: dict[str, str] = {}
    counts = {"blocks run": 0, "inline run": 0}
    inline_spans: dict[str, set[str]] = {}
    try:
        for doc in docs:
            path = os.path.join(ROOT, doc)
            rel = os.path.relpath(path, ROOT)
            text = open(path, encoding="utf-8").read()
            for m in re.finditer(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
                if INLINE_PREFIX.match(m.group(1)):
                    inline_spans.setdefault(m.group(1), set()).add(rel)
            blocks = parse_blocks(path)
            if not blocks:
                continue
            h.down()
            labelled = labels(blocks)
            for line, directive, code in blocks:
                where = f"{rel}:{line}"
                if directive is None:
                    failures.append(f"{where}: shell block without a <!-- check: ... --> directive")
                    continue
                try:
                    d = parse_directive(directive)
                except Failure as e:
                    failures.append(f"{where}: {e}")
                    continue
                cmds = command_lines(code)
                if d["action"] == "skip":
                    for c in cmds:
                        covered[c] = d["why"]
                    print(f"{where}: not run: {d['why']}")
                    continue
                run = code
                if d["steps"]:
                    try:
                        run = "".join(code if n == "." else labelled[n] for n in d["steps"].split(","))
                    except KeyError as e:
                        failures.append(f"{where}: steps names {e}, no label of a block in {rel}")
                        continue
                if d["exclude"]:
                    kept = []
                    for raw in code.splitlines():
                        if raw.strip().startswith(d["exclude"]):
                            covered[re.sub(r"\s+#.*$", "", raw).strip()] = d["why"]
                        else:
                            kept.append(raw)
                    run = "\n".join(kept) + "\n"
                say(f"{where} (needs: {','.join(d['needs']) or '-'})")
                print(run, end="")
                before = h.untracked()
                try:
                    h.ensure(d["needs"])
                    started = time.monotonic()
                    r = h.block(run, d["needs"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=BLOCK_TIMEOUT)
                    print(f"  ({time.monotonic() - started:.1f} s)")
                    out = r.stdout
                    lines = out.splitlines()
                    if len(lines) > 60:
                        lines = lines[:20] + [f"... {len(lines) - 40} lines ..."] + lines[-20:]
                    print("\n".join("  | " + x for x in lines))
                    if r.returncode != 0:
                        failures.append(f"{where}: exit code {r.returncode}")
                    elif d["expect"] and not re.search(d["expect"], out, re.M):
                        failures.append(f"{where}: output does not match {d['expect']!r}")
                    else:
                        counts["blocks run"] += 1
                        ran_lines.update(command_lines(run))
                except (subprocess.SubprocessError, Failure) as e:
                    failures.append(f"{where}: {e}")
                finally:
                    if os.path.islink(RELEASES_LINK):
                        os.remove(RELEASES_LINK)
                    for f in h.untracked() - before:
                        p = os.path.join(ROOT, f)
                        if os.path.isfile(p):
                            os.remove(p)
                if d["after"] == "down":
                    h.down()

        say("inline commands")
        for span, docs in sorted(inline_spans.items()):
            where = ", ".join(sorted(docs))
            if any(line == span or line.startswith(span + " ") for line in ran_lines):
                print(f"{span!r}: a line of a block that ran")
                continue
            if span in covered:
                print(f"{span!r}: {covered[span]}")
                continue
            entry = INLINE.get(span)
            if entry is None and only:
                print(f"{span!r}: not checked (it may be a line of a block in a document left out)")
                continue
            if entry is None:
                failures.append(f"{where}: inline command {span!r} is neither run here nor listed in "
                                "INLINE (e2e/scripts/docs-check.py) with what covers it")
                continue
            kind, what = entry
            if kind in ("run", "run-then-diff", "template"):
                cmd = what if kind == "template" else span
                if kind == "template":
                    h.ensure(["cluster"])
                elif what and kind == "run":
                    h.ensure(what)
                r = h.sh(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)
                if r.returncode != 0:
                    failures.append(f"{where}: {cmd!r} exit code {r.returncode}:\n{r.stdout[-2000:]}")
                    continue
                if kind == "run-then-diff":
                    diff = subprocess.run(["git", "status", "--porcelain", "--", what], cwd=ROOT,
                                          capture_output=True, text=True).stdout
                    if diff.strip():
                        failures.append(f"{where}: {span!r} changed committed files:\n{diff}")
                        continue
                counts["inline run"] += 1
                print(f"{span!r}: ran ({cmd})")
            else:
                print(f"{span!r}: {kind}: {what}")
        for span in sorted(set(INLINE) - set(inline_spans)) if not only else []:
            failures.append(f"INLINE entry {span!r} no longer appears in the docs: remove it")
    finally:
        h.down()
        shutil.rmtree(h.tmp, ignore_errors=True)

    say("summary")
    print(f"{counts['blocks run']} blocks and {counts['inline run']} inline commands run as written; "
          f"{len(failures)} failures")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
