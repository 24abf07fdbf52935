# trainops — see README.md. Every tool the targets need is built from source
# through the Go module proxy by the targets themselves.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w \
	-X github.com/trainops/trainops/internal/version.Version=$(VERSION) \
	-X github.com/trainops/trainops/internal/version.Commit=$(COMMIT)

CONTROLLER_GEN := go -C hack/tools/codegen tool controller-gen
HELM := go -C hack/tools/helm tool helm
GO_TEST_FLAGS ?= -count=1 -timeout 45m
# Test packages each start their own control plane; two at a time fit 2 cores.
GO_TEST_PARALLEL ?= 2

.PHONY: all
all: build

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/trainops (static, trimmed, version stamped).
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/trainops ./cmd/trainops

.PHONY: generate
generate: ## Generate deepcopy code for the APIs, the GPU Operator's functions the GPU parity tests run, and the NVML stand-in's stubs.
	$(CONTROLLER_GEN) object:headerFile=$(CURDIR)/hack/boilerplate.go.txt paths=$(CURDIR)/api/...
	go -C hack/tools/gpuparity generate ./...
	go -C hack/tools/nvml generate ./...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/, and the Helm chart's copies of them.
	$(CONTROLLER_GEN) crd paths=$(CURDIR)/api/... output:crd:artifacts:config=$(CURDIR)/config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=trainops-manager paths=$(CURDIR)/internal/... output:rbac:artifacts:config=$(CURDIR)/config/rbac
	go run ./hack/chartgen

.PHONY: docs
docs: ## Regenerate docs/api.md, docs/cli.md and docs/configuration.md from the code.
	go test ./internal/crdschema ./internal/cli -run 'Docs|APIReference' -count=1 -update

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet every package.
	go vet ./...

.PHONY: verify
verify: generate manifests ## Fail if generated files are stale, code is unformatted or go.mod is untidy.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	go mod tidy -diff
	@git diff --exit-code -- api config charts || { echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { echo "untracked generated files:"; git status --porcelain -- api config charts; exit 1; }
	go vet ./...
	$(HELM) lint --strict $(CURDIR)/charts/trainops

.PHONY: testcluster
testcluster: ## Build the local control plane (kube-apiserver, controller-manager, scheduler, etcd, kwok), the real node's parts and Gitea.
	./hack/build-controlplane.sh
	./hack/build-node.sh
	./hack/build-gitea.sh

IMAGE_DIR ?= bin/image
IMAGE_REPOSITORY ?= ghcr.io/trainops/trainops
.PHONY: image
image: build ## Write trainops's image, the node's pause image and the training image to bin/image (index.txt lists them), without Docker.
	./hack/build-node.sh
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) go run ./hack/image build --out $(IMAGE_DIR) \
		--binary bin/trainops --pause bin/node/current/pause --repository $(IMAGE_REPOSITORY) --version $(VERSION) --commit $(COMMIT)
	IMAGE_DIR=$(CURDIR)/$(IMAGE_DIR) ./hack/training-image.sh

.PHONY: chart
chart: ## Package charts/trainops into bin/chart, its appVersion (the default image tag) this build's version.
	$(HELM) package $(CURDIR)/charts/trainops --app-version $(VERSION) --destination $(CURDIR)/bin/chart

.PHONY: image-push
image-push: ## Push the images of bin/image to REGISTRY=host[:port]/path (credentials of docker login; INSECURE=1 for plain HTTP).
	@test -n "$(REGISTRY)" || { echo "set REGISTRY=host[:port]/path"; exit 1; }
	go run ./hack/image push --index $(IMAGE_DIR)/index.txt --registry $(REGISTRY) $(if $(INSECURE),--insecure)

.PHONY: demo
demo: build testcluster image ## Run trainops on a local simulated GPU cluster (DEMO_ONCE=1: exit once settled).
	go run ./hack/demo

# The C headers of go-nvml, which the NVML stand-in (hack/tools/nvml) is
# compiled against (downloaded first on a new machine).
NVML_CFLAGS = -I$(shell go -C hack/tools/nvml mod download -json github.com/NVIDIA/go-nvml | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/pkg/nvml

.PHONY: test
test: testcluster image bin/promtool bin/kustomize ## Run every test, cluster tests included, against the local control plane, then each fuzz target briefly.
	CGO_ENABLED=0 go test -p $(GO_TEST_PARALLEL) $(GO_TEST_FLAGS) ./...
	CGO_ENABLED=1 go -C hack/tools/gpuparity test $(GO_TEST_FLAGS) ./...
	CGO_ENABLED=1 CGO_CFLAGS="$(NVML_CFLAGS)" go -C hack/tools/nvml test $(GO_TEST_FLAGS) ./...
	PROMTOOL=$(CURDIR)/bin/promtool go -C hack/tools/monitoring test $(GO_TEST_FLAGS) ./...
	CGO_ENABLED=1 go test -race $(GO_TEST_FLAGS) ./render/internal/fast
	$(MAKE) fuzz FUZZTIME=10000x

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (hack/unit-packages.sh lists them): the edit loop's minutes.
	CGO_ENABLED=0 go test $(GO_TEST_FLAGS) $$(hack/unit-packages.sh)

# kustomize, the release whose api module trainops links, for `make bench`
# to measure renders outside the fast path against (and its smoke test in
# `make test`).
bin/kustomize: hack/tools/kustomize/go.mod hack/tools/kustomize/go.sum
	go -C hack/tools/kustomize build -o $(CURDIR)/bin/kustomize sigs.k8s.io/kustomize/kustomize/v5

# promtool, for `promtool check rules` on the chart's PrometheusRule.
bin/promtool: hack/tools/promtool/go.mod hack/tools/promtool/go.sum
	go -C hack/tools/promtool build -o $(CURDIR)/bin/promtool github.com/prometheus/prometheus/cmd/promtool

FUZZTIME ?= 1m
# Each input of FuzzFastPathMatchesKrusty runs a krusty build in a child
# process: it gets a count of its own.
FUZZTIME_KRUSTY ?= 200x
.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m): repository YAML, settings, webhook signatures; the fast path against krusty for FUZZTIME_KRUSTY.
	go test -run XXX -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./render
	go test -run XXX -fuzz '^FuzzFastPathMatchesKrusty$$' -fuzztime $(FUZZTIME_KRUSTY) ./render
	go test -run XXX -fuzz '^FuzzSourceKeepsTheObjects$$' -fuzztime $(FUZZTIME) ./render
	go test -run XXX -fuzz '^FuzzParseBudget$$' -fuzztime $(FUZZTIME) ./internal/config
	go test -run XXX -fuzz '^FuzzParseKinds$$' -fuzztime $(FUZZTIME) ./internal/config
	go test -run XXX -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./internal/signature

.PHONY: bench
bench: build testcluster bin/kustomize ## Measure sync, children, re-sync, drift, push, diff, memory (BENCH_N=100,1000,5000); writes docs/benchmarks.md.
	go test -run XXX -bench . -benchtime 3x ./...
	TRAINOPS_BIN=$(CURDIR)/bin/trainops go run ./hack/bench

.PHONY: clean
clean: ## Remove build output (keeps the cached control plane).
	rm -rf bin/trainops
