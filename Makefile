# capi-provider-operator — everything a new machine needs is installed by these targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
SCRIPTS := e2e/scripts
# Build outputs live outside the clone so a fresh clone builds warm.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/capi-provider-operator/target
export CAPI_CLUSTER_DIR ?= $(or $(TMPDIR),/tmp)/capi-provider-operator-cluster-$(shell id -u)
BIN := $(CARGO_TARGET_DIR)/debug/capi-provider-operator
# Every build step uses this one invocation: cargo unifies features over the packages and
# targets it builds, so a `-p` subset would compile the shared dependencies again with other
# features — minutes each on a cold machine.
BUILD := $(CARGO) build --locked --workspace --all-targets

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## Install the toolchain pieces (rustfmt, clippy) and build the local control plane.
	@bash $(SCRIPTS)/deps.sh

.PHONY: control-plane
control-plane: ## Build (or reuse from cache) etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok.
	@$(SCRIPTS)/build.sh >/dev/null

.PHONY: providers
providers: ## Build (or reuse from cache) the real Cluster API managers and cert-manager the real node runs (make images packages them).
	@$(SCRIPTS)/build-providers.sh >/dev/null

.PHONY: images
images: providers ## Package the managers build-providers.sh builds as OCI images, pushed to a local registry's storage under their release names (cached by version; e2e/scripts/images.sh).
	@$(SCRIPTS)/images.sh >/dev/null

.PHONY: image
image: images ## The operator's image, built offline from this checkout as the Dockerfile declares it (release build for amd64 and arm64 in one OCI index, glibc, CA certificates, user 65532), pushed to the images' registry storage under the chart's default reference (cached; e2e/scripts/operator-image.sh).
	@$(SCRIPTS)/operator-image.sh >/dev/null

.PHONY: cluster-up
cluster-up: control-plane ## Start the local control plane in the background; prints the kubeconfig path.
	@$(SCRIPTS)/cluster-up.sh

.PHONY: cluster-down
cluster-down: ## Stop the local control plane and remove its data.
	@$(SCRIPTS)/cluster-down.sh

.PHONY: build
build: ## Build the workspace.
	$(BUILD)

.PHONY: fmt-check
fmt-check:
	$(CARGO) fmt --all -- --check

.PHONY: clippy
clippy:
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	@# The decision layer built alone: features are unified only over the packages built, so
	@# here kube has no `client` feature and a decision naming kube::Client, Api or tokio fails
	@# to compile. k8s-openapi takes its Kubernetes version from the environment, since only the
	@# binary crates choose one.
	K8S_OPENAPI_ENABLED_VERSION=1.34 $(CARGO) check --locked -p capi-decide --lib
	@python3 $(SCRIPTS)/module-graph.py
	@python3 $(SCRIPTS)/test-honesty.py
	@# Dependencies no source uses (cargo-machete reads the sources, not the build: seconds).
	@"$$($(SCRIPTS)/cargo-tool.sh cargo-machete 0.9.1)" --skip-target-dir
	@# Licences, duplicate crate versions and sources (deny.toml; no network: the advisories,
	@# which need the RustSec database, are `make advisories`).
	@"$$($(SCRIPTS)/cargo-tool.sh cargo-deny 0.20.2)" --locked check licenses bans sources

.PHONY: advisories
advisories: ## cargo-deny's advisories check against the RustSec database (cloned or updated from GitHub, or from ADVISORY_DB, a checkout or mirror of it).
	@$(SCRIPTS)/advisories.sh

.PHONY: crds
crds: ## Regenerate manifests/crds from the Rust types.
	@$(BUILD) -q
	$(BIN) crds --output-dir manifests/crds

.PHONY: docs
docs: ## Regenerate docs/api-reference.md from the CRD field docs.
	@$(BUILD) -q
	$(BIN) api-docs > docs/api-reference.md
	$(BIN) run --help | python3 $(SCRIPTS)/flags-doc.py

.PHONY: gitops
gitops: ## Regenerate examples/gitops/argocd/argocd-cm.yaml from health.lua.
	@$(BUILD) -q
	$(BIN) argocd-health > examples/gitops/argocd/argocd-cm.yaml

.PHONY: chart-readme
chart-readme: ## Regenerate the Helm chart's README.md from its values.schema.json.
	@python3 $(SCRIPTS)/chart-readme.py

.PHONY: check-generated
check-generated: ## Fail when committed generated files are stale.
	@$(BUILD) -q
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(BIN) crds --output-dir $$tmp; \
	if ! diff -ru manifests/crds $$tmp; then echo "manifests/crds is stale: run 'make crds'" >&2; exit 1; fi; \
	$(BIN) api-docs > $$tmp/api-reference.md; \
	if ! diff -u docs/api-reference.md $$tmp/api-reference.md; then echo "docs/api-reference.md is stale: run 'make docs'" >&2; exit 1; fi; \
	$(BIN) argocd-health > $$tmp/argocd-cm.yaml; \
	if ! diff -u examples/gitops/argocd/argocd-cm.yaml $$tmp/argocd-cm.yaml; then echo "examples/gitops/argocd/argocd-cm.yaml is stale: run 'make gitops'" >&2; exit 1; fi; \
	$(BIN) run --help | python3 $(SCRIPTS)/flags-doc.py --check; \
	python3 $(SCRIPTS)/chart-readme.py --check

# The tests that compare what the project builds with the files published outside it (in
# ../shared, or CAPI_SHARED_DIR) are #[ignore]d with that reason: they run where those files are.
# A fresh clone has none, and its summary counts them as ignored.
PUBLISHED := $(if $(wildcard $(or $(CAPI_SHARED_DIR),../shared)/testdata),--include-ignored,)

.PHONY: unit
unit: providers ## Unit tests (no cluster; some read the Cluster API releases make providers assembles).
	CAPI_PROVIDER_IMAGES=$$($(SCRIPTS)/build-providers.sh) $(CARGO) test --workspace --lib --bins -- $(PUBLISHED)

.PHONY: integration
# The operator's areas that run real managers on a real node of their own (each starts its own
# private cluster, under root): the heaviest, so at most NODE_LANES of them run at once.
NODE_AREAS := node:: root:: clusterctl:: upgrade_real::
TEST_LANES ?= 3
NODE_LANES ?= 2

integration: control-plane providers images image ## Integration tests: every area of every crate's integration-test binary, run in TEST_LANES lanes side by side (each with a local control plane of its own; the longest areas first, by the last run's durations), at most NODE_LANES areas with a real node at once (e2e/scripts/test-lanes.py).
	@bin=$$($(SCRIPTS)/build.sh) && helm=$$($(SCRIPTS)/helm.sh) && images=$$($(SCRIPTS)/build-providers.sh) && \
	CAPI_KUBECTL=$$bin/kubectl CAPI_HELM=$$helm CAPI_PROVIDER_IMAGES=$$images CARGO=$(CARGO) \
	  python3 $(SCRIPTS)/test-lanes.py --lanes $(TEST_LANES) --node-lanes $(NODE_LANES) --node-areas $(NODE_AREAS) $(PUBLISHED)

.PHONY: real-node-check
real-node-check: control-plane images ## The real node (containerd, runc, CNI, kubelet, kube-proxy): a restricted pod reaches the API server through its Service and is reached at its IP; release images pull through the registry mirror unchanged, a wrong tag and a private repository without its pull secret fail; cluster-down leaves nothing behind. Needs root.
	@$(SCRIPTS)/real-node-check.sh

.PHONY: alerts-check
alerts-check: ## Check the alerting rules and run their unit tests with the real promtool (built once by e2e/scripts/promtool.sh).
	@promtool=$$($(SCRIPTS)/promtool.sh); \
	$$promtool check rules manifests/monitoring/prometheus-rules.yaml; \
	$$promtool test rules manifests/monitoring/prometheus-rules.test.yaml

.PHONY: docs-check
docs-check: control-plane providers images image ## Check every link of the Markdown files, then run every command README.md, docs/ and examples/ show, as written, on private local control planes (the README's quick start from the release output on a real node: root).
	@python3 $(SCRIPTS)/docs-links.py
	@python3 $(SCRIPTS)/architecture-check.py
	@python3 $(SCRIPTS)/docs-check.py

# The book is built outside the clone, next to the other build outputs.
BOOK_DIR ?= $(CARGO_TARGET_DIR)/book

.PHONY: docs-book
docs-book: ## Build docs/ as a book with mdBook into BOOK_DIR (default $CARGO_TARGET_DIR/book) and check the links of its pages.
	@mdbook=$$($(SCRIPTS)/mdbook.sh); $$mdbook build docs -d $(abspath $(BOOK_DIR))
	@python3 $(SCRIPTS)/docs-links.py --html $(BOOK_DIR)
	@echo "the book: $(BOOK_DIR)/index.html"

.PHONY: docs-serve
docs-serve: ## Serve the book at http://localhost:3000, rebuilt on every change of docs/.
	@mdbook=$$($(SCRIPTS)/mdbook.sh); $$mdbook serve docs -d $(abspath $(BOOK_DIR))

.PHONY: dist
dist: ## Release artifacts in DIST_DIR (default dist/): the plugin for linux (amd64, arm64) and, given a macOS SDK (SDKROOT), macOS, with its krew manifest, the Helm chart and its index, the SBOM, SHA256SUMS; then checked.
	@$(SCRIPTS)/dist.sh
	@python3 $(SCRIPTS)/dist-check.py --dir $${DIST_DIR:-dist}

.PHONY: dist-check
dist-check: ## Package this machine's debug build as make dist packages a release, and check every artifact.
	@python3 $(SCRIPTS)/dist-check.py

.PHONY: release
release: ## make dist, plus the operator image (OCI layout, amd64 and arm64), capi-provider-operator.yaml with the image pinned by digest, all signed with cosign (VERSION=vX.Y.Z, the tree's version; COSIGN_KEY, COSIGN_PASSWORD, COSIGN_PUB); then make release-check.
	@[[ -n "$${COSIGN_PUB:-}" ]] || { echo "make release: COSIGN_PUB (the public key of COSIGN_KEY) is needed to check the release" >&2; exit 2; }
	@VERSION=$(VERSION) $(SCRIPTS)/release.sh
	@python3 $(SCRIPTS)/release-check.py --dir $${DIST_DIR:-dist} --key $$COSIGN_PUB

.PHONY: release-check
release-check: ## Verify the release in DIST_DIR (default dist/) against COSIGN_PUB: every signature and digest, the image pinned, the artifacts as make dist-check checks them, the image and chart pushed to a local registry (e2e/scripts/release-check.py).
	@python3 $(SCRIPTS)/release-check.py --dir $${DIST_DIR:-dist} --key $${COSIGN_PUB:?COSIGN_PUB: the release public key}

.PHONY: release-self-test
release-self-test: image ## Build a release of this checkout (the plugin of the debug build) signed with a throwaway key pair, verify it, sign and verify the image in a local registry, and require tampered copies to be refused.
	@python3 $(SCRIPTS)/release-check.py --self-test

.PHONY: fuzz-short
fuzz-short: ## A short coverage-guided fuzzing run (20 s per target, no sanitizer; needs nightly Rust).
	@FUZZ_SANITIZER=none $(SCRIPTS)/fuzz.sh 20

.PHONY: fuzz
fuzz: ## The long fuzzing run (FUZZ_SECONDS per target, default 300); results in docs/hardening.md.
	@$(SCRIPTS)/fuzz.sh $${FUZZ_SECONDS:-300}

.PHONY: soak-faults
soak-faults: ## The fault-injection tier at length: SOAK_FAULT_RUNS (default 100000) seeded runs from SOAK_SEED (default: the time); no cluster.
	@base=$${SOAK_SEED:-$$(date +%s)}; \
	echo "fault injection: seeds from $$base (a failure prints FAULT_SEED=<n>; replay it with FAULT_SEED=<n> cargo test -p capi-provider-operator --lib controller::testing::faults)"; \
	FAULT_RUNS=$${SOAK_FAULT_RUNS:-100000} FAULT_SEED_BASE=$$base \
	  $(CARGO) test --locked -p capi-provider-operator --lib controller::testing::faults::seeded -- --nocapture

.PHONY: soak
soak: soak-faults control-plane images ## Long fault injection: the fault tier's SOAK_FAULT_RUNS (default 100000) seeded runs; SOAK_RUNS (default 25) seeded kills per flow, apiserver restart; SOAK_WORKLOAD_KILLS (default 10) kills per step of the workload-cluster upgrade.
	@dir=$$(mktemp -u -t capi-soak-XXXXXX); \
	trap '$(SCRIPTS)/cluster-down.sh --dir '"$$dir"' || true' EXIT; \
	kc=$$($(SCRIPTS)/cluster-up.sh --dir $$dir); \
	seed=$${SOAK_SEED:-$$(date +%s)}; \
	CAPI_TEST_KUBECONFIG=$$kc CAPI_KUBECTL=$$($(SCRIPTS)/build.sh)/kubectl \
	CAPI_KILL_RUNS=$${SOAK_RUNS:-25} CAPI_KILL_SEED=$$seed \
	  $(CARGO) test -p capi-provider-operator --test it lifecycle_kill -- --nocapture; \
	CAPI_KUBECTL=$$($(SCRIPTS)/build.sh)/kubectl CAPI_HELM=$$($(SCRIPTS)/helm.sh) \
	CAPI_PROVIDER_IMAGES=$$($(SCRIPTS)/build-providers.sh) \
	CAPI_KILL_RUNS=$${SOAK_WORKLOAD_KILLS:-10} CAPI_KILL_SEED=$$seed \
	  $(CARGO) test -p capi-provider-operator --test it node::workload_cluster -- --nocapture

.PHONY: test
test: deps fmt-check clippy check-generated unit alerts-check long-checks real-node-check ## Everything CI runs.

# real-node-check is not among them: its leftover check would take the processes and mounts of a
# test's real node for its own.
.PHONY: long-checks
long-checks: ## make integration beside docs-check, fuzz-short, docs-book, dist-check and release-self-test, two of those at a time (the tests and the docs mostly wait on controllers; the others are short); each one's output is printed when it ends.
	@$(MAKE) --no-print-directory -j3 -k --output-sync=target integration docs-check fuzz-short docs-book dist-check release-self-test

.PHONY: demo
demo: deps control-plane ## The operator demo: local control plane, CRDs, operator, sample providers until Ready.
	@$(SCRIPTS)/demo.sh

.PHONY: demo-real
demo-real: ## The demo on the real node (root): images, the operator from its Helm chart, cert-manager, the real Cluster API v1.12.0 providers and a workload cluster on the in-memory provider (e2e/scripts/demo-real.sh).
	@$(SCRIPTS)/demo-real.sh

.PHONY: bench
bench: control-plane ## Benchmarks: render time; the index's routing and queries (1/30/300 providers); install ratio, idle writes, RSS; scale (1/10/30 providers, restart); side by side with cluster-api-operator (peer; BENCH_QUICK=1 for a quick check); writes docs/performance.md; the real node's start to Ready (target 20 s, root).
	@mkdir -p $(HOME)/.cache/capi-provider-operator/bench
	$(CARGO) bench -p capi-components --bench render | tee $(HOME)/.cache/capi-provider-operator/bench/render.txt
	$(CARGO) bench -p capi-provider-operator --bench index | tee $(HOME)/.cache/capi-provider-operator/bench/index.txt
	$(CARGO) build --release -p capi-provider-operator --bin capi-provider-operator
	python3 e2e/bench/install.py
	python3 e2e/bench/scale.py
	python3 e2e/bench/peer.py
	python3 e2e/bench/report.py
	python3 e2e/bench/real_node.py
