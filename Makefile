# podset-operator: `make run` and `make test` work from a fresh machine; each installs what
# it needs (apt, cargo, go) and says what it is doing.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The Kubernetes the local clusters run: hack/go/versions.env's newest supported release
# unless K8S_VERSION says otherwise (`K8S_VERSION=1.33 make test`). K8S_OLDEST, the low end
# of the supported range, also runs the walkthroughs, restart tests and installs in `make test`.
K8S_VERSION ?= $(shell sed -n 's/^K8S_VERSION=//p' hack/go/versions.env)
K8S_OLDEST := $(shell sed -n 's/^K8S_OLDEST=//p' hack/go/versions.env)
override K8S_VERSION := $(shell bash -c 'source hack/go/env.sh && resolve_k8s_version $(K8S_VERSION)')
export K8S_VERSION
# Recipes (and the tests) use the kubectl of the cluster's own version, and our helm CLI.
HELM_VERSION := $(shell sed -n 's/^HELM_VERSION=//p' hack/go/versions.env)
export PATH := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/podset-operator/kubernetes-v$(K8S_VERSION)/bin:$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/podset-operator/helm-v$(HELM_VERSION)/bin:$(PATH)
# The tests that also run on K8S_OLDEST: integration targets, then name filters.
OLDEST_TESTS := real_node faults in_cluster -- podset_walkthrough at_echo_yay apiserver_restart previous_install_yaml_upgraded previous_chart_upgraded_from_oci

CLUSTER_DIR ?= $(CURDIR)/.local/cluster
# make cluster-up / make run: real nodes (pods run real containers) and kubemark hollow nodes.
REAL_NODES ?= 1
HOLLOW_NODES ?= 0
KUBECONFIG_LOCAL := $(CLUSTER_DIR)/kubeconfig
BIN := target/debug/podset-operator
# Each test control plane leaves there the requests of the operator's ServiceAccount (testenv::audit).
AUDIT_DIR := $(CURDIR)/target/audit
IMG ?= podset-operator:0.1.0
# The chart's version as `make helm-package` packages it, and where it pushes it (oci://).
CHART_VERSION ?= $(shell sed -n 's/^version: //p' charts/podset-operator/Chart.yaml)
CHART_REGISTRY ?=
CARGO ?= cargo
# `make test` runs these seeds of the simulation: the same on every run, so a red one replays.
SIM_SEEDS ?= 10000
SIM_START ?= 0
# `make sim`: SEEDS seeds from a fresh random start (START=S to choose), or SEED=S replayed.
SEEDS ?= 1000
comma := ,
# $(call say,message): make splits call arguments at commas, so say joins them back.
say = @printf '\033[1m[make %s]\033[0m %s\n' "$@" "$(1)$(if $(2),$(comma)$(2))$(if $(3),$(comma)$(3))$(if $(4),$(comma)$(4))"

.PHONY: help
help: ## Show the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

.PHONY: deps rust-deps
deps: ## Install system packages the project needs (apt) and check the Rust toolchain
	@bash hack/install-deps.sh
rust-deps: ## Check the Rust toolchain alone: all the operator's own build needs (no Go, no apt)
	@bash hack/install-deps.sh rust

.PHONY: kubernetes
kubernetes: deps ## Build (once, cached) Kubernetes $K8S_VERSION, etcd, containerd and the helm CLI from the Go module proxy, and the node images
	@bash hack/build-kubernetes.sh $(K8S_VERSION)
	@bash hack/build-node-images.sh

.PHONY: build
build: rust-deps ## Build the operator and the local-cluster tool
	$(call say,cargo build (the first build compiles ~300 crates; cargo shows progress))
	$(CARGO) build --workspace --bins

.PHONY: test
test: deps ## Build everything and run every test (unit, end to end on real local clusters of $K8S_VERSION, some also on $K8S_OLDEST)
	$(call say,building Kubernetes $(K8S_VERSION) and $(K8S_OLDEST) (etcd, containerd, the helm CLI, node images) beside the cargo builds)
	@bash hack/in-background.sh start kubernetes bash -c 'bash hack/build-kubernetes.sh $(K8S_VERSION) $(K8S_OLDEST) && bash hack/build-node-images.sh'
	$(call say,cargo build --workspace --all-targets)
	$(CARGO) build --workspace --all-targets
	$(call say,checking formatting and lints)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(call say,the deterministic simulation: $(SIM_SEEDS) seeds from $(SIM_START)$(comma) each a run of 1-3 replicas under seeded faults$(comma) invariants at every step (make sim to search new seeds))
	target/debug/podset-sim --seeds $(SIM_SEEDS) --start $(SIM_START) --threads $${TEST_THREADS:-2}
	$(call say,building the operator's image offline: static binary (hack/build-static.sh) + buildah; the in-cluster tests run it)
	@bash hack/build-image.sh
	@bash hack/check-static.sh
	@bash hack/in-background.sh wait kubernetes
	$(call say,running tests on Kubernetes $(K8S_VERSION)$(if $(filter-out $(K8S_OLDEST),$(K8S_VERSION)), (the walkthroughs$(comma) API server restarts and installs also on $(K8S_OLDEST))): unit tests and end-to-end tests that each start a real control plane (real nodes run real containers)$(comma) $${TEST_JOBS:-2} test binaries at a time)
	rm -rf $(AUDIT_DIR)
	PODSET_AUDIT_DIR=$(AUDIT_DIR) bash hack/run-tests.sh $(if $(filter-out $(K8S_OLDEST),$(K8S_VERSION)),--oldest $(K8S_OLDEST) $(OLDEST_TESTS))
	$(call say,least privilege: every request the operator made in those tests against the generated RBAC rules)
	PODSET_AUDIT_DIR=$(AUDIT_DIR) RUST_LIB_BACKTRACE=0 $(CARGO) test --test audit -- --ignored --nocapture
	$(call say,benchmark harness smoke run: tiny sizes, checks the harness and its invariants, not speed)
	target/debug/podset-bench --smoke --operator target/debug/podset-operator --csv target/bench/smoke.csv
	@bash hack/check-no-leftovers.sh

.PHONY: sim
sim: rust-deps ## The deterministic simulation: SEEDS=N seeds from a fresh random start (or START=S), or SEED=S replayed with its trace
	$(call say,cargo build -p podset-sim)
	$(CARGO) build -p podset-sim --bin podset-sim
	@if [ -n "$(SEED)" ]; then \
	  target/debug/podset-sim --seed $(SEED); \
	else \
	  target/debug/podset-sim --seeds $(SEEDS) $(if $(START),--start $(START)); \
	fi

.PHONY: input-search
input-search: kubernetes ## PodSets and Ats drawn from the CRD schemas, on a local cluster: SEEDS=N from a fresh random start (or START=S), or SEED=S replayed
	$(call say,objects drawn from the CRDs' schemas against a local Kubernetes $(K8S_VERSION); each admitted one must be acted on or reported)
	@if [ -n "$(SEED)" ]; then \
	  INPUT_SEARCH_SEED=$(SEED) $(CARGO) test --test input_search -- --nocapture objects_drawn; \
	else \
	  INPUT_SEARCH_SEEDS=$(SEEDS) INPUT_SEARCH_START=$(START) $(CARGO) test --test input_search -- --nocapture objects_drawn; \
	fi

.PHONY: bench
bench: kubernetes ## Benchmarks vs the ReplicaSet controller and the API floor (release build; ~30 min)
	$(call say,cargo build --release (operator and benchmark harness))
	$(CARGO) build --release -p podset-operator -p podset-bench
	target/release/podset-bench --operator target/release/podset-operator --runs $${BENCH_RUNS:-3} --csv target/bench/results.csv

.PHONY: bench-node
bench-node: kubernetes ## A real node: time to Ready, pod start latency (20 pods), At lateness, kubelet + containerd memory
	$(CARGO) build --release -p podset-operator -p podset-bench
	target/release/podset-bench node --operator target/release/podset-operator

.PHONY: soak
soak: kubernetes ## Soak test: 20 minutes of random scaling and pod deletions, RSS trend reported
	$(CARGO) build --release -p podset-operator -p podset-bench
	target/release/podset-bench soak --minutes $${SOAK_MINUTES:-20} --operator target/release/podset-operator

.PHONY: run
run: rust-deps ## Run the operator: against the kubeconfig's cluster (builds the operator alone), else a local control plane (built once)
	$(call say,cargo build --bin podset-operator (the operator alone))
	$(CARGO) build --bin podset-operator
	@bash hack/run-operator.sh

.PHONY: cluster-up
cluster-up: kubernetes build ## Start the local control plane in the background (kubeconfig printed)
	@bash hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local control plane
	@bash hack/cluster.sh down

.PHONY: manifests
manifests: ## Regenerate the CRD and RBAC manifests (config/, charts/) from the Rust code
	$(CARGO) run -q --bin podset-operator -- manifests --root .

.PHONY: crds
crds: ## Print the CRDs generated from the Rust types
	@$(CARGO) run -q --bin podset-operator -- crds

.PHONY: install
install: ## Install the CRDs (committed in config/crd; nothing built) into the kubeconfig's cluster (server-side apply)
	kubectl apply --server-side --force-conflicts -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs (and with them every PodSet and At)
	kubectl delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: ## Install CRDs, namespace, RBAC and the Deployment running IMG into the kubeconfig's cluster (kustomize)
	@bash hack/release.sh installer $(IMG) .local/deploy/install.yaml
	kubectl apply --server-side --force-conflicts -f .local/deploy/install.yaml

.PHONY: build-installer
build-installer: ## Write dist/install.yaml: everything `make deploy` installs, running IMG, in one file
	@bash hack/release.sh installer $(IMG) dist/install.yaml

.PHONY: helm-package
helm-package: ## Package the chart running IMG as dist/podset-operator-CHART_VERSION.tgz; CHART_REGISTRY=host/path pushes it (helm push, oci://)
	@bash hack/release.sh chart $(IMG) $(CHART_VERSION) dist
	@if [ -n "$(CHART_REGISTRY)" ]; then bash hack/release.sh push-chart dist/podset-operator-$(CHART_VERSION).tgz $(CHART_REGISTRY); fi

.PHONY: undeploy
undeploy: ## Remove what `make deploy` (or `make deploy-local`) installed, CRDs (so every PodSet and At) included
	@if [ -f "$(CLUSTER_DIR)/deploy-local/kustomization.yaml" ] && [ -z "$${KUBECONFIG:-}" ]; then \
	  CLUSTER_DIR="$(CLUSTER_DIR)" bash hack/deploy-local.sh undeploy; \
	else kubectl -n podset-operator-system delete deployment podset-operator-controller-manager --ignore-not-found --cascade=foreground --wait=true; \
	  kubectl delete --ignore-not-found -k config/default; fi

.PHONY: image
image: ## Build the operator's image offline (buildah, no Docker engine): target/image/podset-operator.tar
	@bash hack/build-image.sh

.PHONY: deploy-local
deploy-local: ## With `make cluster-up` running: build the image, push it to its registry, install config/default with it
	@CLUSTER_DIR="$(CLUSTER_DIR)" bash hack/deploy-local.sh

.PHONY: static
static: ## Build the static release binary the image ships (target/static/podset-operator) and check it
	@bash hack/build-static.sh
	@bash hack/check-static.sh

.PHONY: docker-build
docker-build: ## Build the container image $(IMG) with Docker (for real registries; `make image` needs no Docker)
	docker build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the image $(IMG) that `make docker-build` built
	docker push $(IMG)

.PHONY: image-push
image-push: image ## Push the image `make image` built to IMG without Docker (skopeo; log in with `skopeo login`)
	skopeo copy --quiet oci-archive:target/image/podset-operator.tar docker://$(IMG)

.PHONY: helm-lint
helm-lint: deps ## Lint the Helm chart with the helm CLI (built once, cached), both watch scopes
	@bash hack/build-kubernetes.sh --helm-only
	helm lint charts/podset-operator --strict
	helm lint charts/podset-operator --strict --set-string watchNamespace=example
