# binlog-relay. `make demo` and `make test` do all the set-up on a fresh
# machine: scripts/stack.sh installs and starts the test stack.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := bin/binlog-relay
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The same -X flags as the Dockerfile and .goreleaser.yaml: `binlog-relay version`.
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
IMAGE ?= binlog-relay:$(VERSION)
# Release and deploy tools, pinned; built by go run on first use (test/deploy runs the same).
HELM ?= $(GO) run helm.sh/helm/v3/cmd/helm@v3.22.0
GORELEASER ?= $(GO) run github.com/goreleaser/goreleaser/v2@v2.15.1
CHART := deploy/helm/binlog-relay

.PHONY: build image chart release-check snapshot stack-up stack-down stack-status test ci-mariadb up-test-mysql ci-deploy test-mariadb test-mysql test-flavor inbox-soak unit lint demo bench chaos clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/binlog-relay

# The container image, version and commit stamped as in a release.
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

# helm lint and render the chart (make test does this and checks the objects: test/deploy).
chart:
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/ha-values.yaml
	$(HELM) template binlog-relay $(CHART) -f $(CHART)/ci/ha-values.yaml > /dev/null

# Validate .goreleaser.yaml (make test runs it too); snapshot builds a release locally.
release-check:
	$(GORELEASER) check

snapshot:
	$(GORELEASER) release --snapshot --clean

stack-up:
	scripts/stack.sh up

stack-down:
	scripts/stack.sh down

stack-status:
	scripts/stack.sh status

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

# Unit tests only (no servers needed).
unit:
	$(GO) test -short -count=1 ./...

# Unit and integration tests against the local stack, on every flavour of it
# (scripts/stack.sh), in lanes side by side (scripts/testlanes.sh) that
# share no database server and no broker: test-mariadb runs everything on
# MariaDB 10.11 with RabbitMQ 3.10; test-mysql runs the suites that touch a
# server on MySQL 9.7 with RabbitMQ 4.3, then the core suites (drain, kill
# -9, positions, XA, the seed tables) on MariaDB 11.8 with RabbitMQ 4.3.
# Within a lane packages run one at a time (-p 1): they share the lane's
# servers, and some tests read global server counters.
FLAVOR_PKGS := ./test/integration ./test/chaos ./internal/publisher ./internal/sweeper ./internal/rowstatus ./pkg/inbox ./examples/embed ./internal/streamlane ./internal/discover
CORE_TESTS := ^(TestRelay|TestSwitchover|TestStoppedSQLThread|TestSameServerID|TestPurgedPosition|TestLostCheckpoint|TestLocalWrites|TestXA|TestSeed)
test:
	@# Three lanes side by side (scripts/testlanes.sh) while the two sid
	@# chroots build (scripts/stack.sh chroots): ci-mariadb starts the MariaDB
	@# 10.11 servers and compiles every test binary meanwhile (the lanes'
	@# go test -p 1 only links), then runs everything but test/deploy on them;
	@# up-test-mysql starts MySQL 9.7 and MariaDB 11.8 once the chroots are
	@# built, then test-mysql; ci-deploy builds helm and goreleaser (minutes
	@# on a fresh machine, a little nicer than the tests), runs gofmt, go vet
	@# and the API check, then test/deploy.
	scripts/stack.sh packages
	@scripts/stack.sh chroots 2>&1 | awk '{ print "[chroots] " $$0; fflush() }' &
	scripts/testlanes.sh ci-mariadb up-test-mysql ci-deploy

# make test's lanes. prebuild compiles test binaries with go test's own
# parallelism, one prebuild at a time (a second lane's finds them cached).
prebuild = { out=$$(flock $${TMPDIR:-/tmp}/binlog-relay-prebuild.lock $(GO) test -count=1 -exec=true $(1) 2>&1) || \
	  { echo "building the tests failed:"; printf '%s\n' "$$out" | grep -v '^ok\|no test files' | tail -60; false; }; }
ci-mariadb:
	@$(call prebuild,./...) & built=$$!; scripts/stack.sh up mariadb-10.11; up=$$?; wait $$built && [ $$up = 0 ]
	@$(MAKE) --no-print-directory test-mariadb MARIADB_PKGS="$$($(GO) list ./... | grep -v /test/deploy$$ | tr '\n' ' ')"

up-test-mysql:
	scripts/stack.sh up mysql-9.7 mariadb-11.8
	@$(call prebuild,$(FLAVOR_PKGS))
	@$(MAKE) --no-print-directory test-mysql

ci-deploy:
	@# go run caches the executable it links: test/deploy's go run of the
	@# same command line finds it built.
	nice -n 3 $(HELM) version >/dev/null
	nice -n 3 $(GORELEASER) --version >/dev/null
	@nice -n 3 $(MAKE) --no-print-directory lint && nice -n 3 scripts/apidiff.sh
	scripts/stack.sh up mariadb-10.11 >/dev/null
	$(GO) test -count=1 -p 1 -timeout 15m $(TESTFLAGS) ./test/deploy

# test-mariadb runs MARIADB_PKGS, every package unless told (make test leaves test/deploy to ci-deploy).
MARIADB_PKGS ?= ./...
test-mariadb:
	$(GO) test -count=1 -p 1 -timeout 25m $(TESTFLAGS) $(MARIADB_PKGS)

test-mysql:
	@# MariaDB 11.8 runs even when MySQL failed: both results are shown.
	RELAY_TEST_FLAVOR=mysql-9.7 $(GO) test -count=1 -p 1 -timeout 25m $(TESTFLAGS) $(FLAVOR_PKGS); mysql=$$?; \
	RELAY_TEST_FLAVOR=mariadb-11.8 $(GO) test -count=1 -p 1 -timeout 15m $(TESTFLAGS) -run '$(CORE_TESTS)' ./test/integration; \
	maria=$$?; exit $$((mysql | maria))

# pkg/inbox's burst of concurrent failures on every pool setting, COUNT times
# (50 by default) on one flavour: a handler must never run twice for one
# delivery (docs/inbox.md, "Database pool and DSN options").
inbox-soak: stack-up
	RELAY_TEST_FLAVOR=$(or $(FLAVOR),mariadb-10.11) $(GO) test -count=$(or $(COUNT),50) -timeout 30m \
		-run '^TestConcurrentFailuresRunEachHandlerOncePerDelivery$$' ./pkg/inbox

# One flavour's suites: make test-flavor FLAVOR=mysql-9.7 [RUN=regexp]
test-flavor: stack-up
	RELAY_TEST_FLAVOR=$(FLAVOR) $(GO) test -count=1 -p 1 -timeout 25m $(if $(RUN),-run '$(RUN)') $(FLAVOR_PKGS)

# Orders -> outbox -> binlog-relay -> RabbitMQ -> inventory through pkg/inbox
# (examples/order-inventory): prints counts by status and checks the stock.
demo: build
	scripts/stack.sh up mariadb-10.11
	ORDERS=$(or $(ORDERS),2000) examples/order-inventory/demo.sh

# make bench [BENCH_FLAVOR=mariadb|mysql|<flavour>] [BENCH_FLAGS=...]: the bench
# (bench/README.md) on one flavour of the stack, its servers and broker only:
# mariadb is mariadb-10.11 (the default) with RabbitMQ 3.10, mysql is
# mysql-9.7 with RabbitMQ 4.3; any name scripts/stack.sh knows works too.
# BENCH_FLAVORS=mariadb,mysql runs it once per flavour, one after the other, and prints each
# step's figures in one table with a column per flavour (bench -flavours).
BENCH_FLAVOR ?= mariadb-10.11
bench_flavor = $(or $(if $(filter mysql,$(BENCH_FLAVOR)),mysql-9.7),$(if $(filter mariadb,$(BENCH_FLAVOR)),mariadb-10.11),$(BENCH_FLAVOR))
bench_comma := ,
bench: build
ifneq ($(BENCH_FLAVORS),)
	for f in $(subst $(bench_comma), ,$(BENCH_FLAVORS)); do \
		case $$f in mysql) f=mysql-9.7;; mariadb) f=mariadb-10.11;; esac; scripts/stack.sh up $$f || exit 1; done
	$(GO) run ./bench -flavours $(BENCH_FLAVORS) $(BENCH_FLAGS)
else
	scripts/stack.sh up $(bench_flavor)
	stack_env="$$(scripts/stack.sh env $(bench_flavor))" && eval "$$stack_env" && $(GO) run ./bench $(BENCH_FLAGS)
endif

# make chaos: random schedules of the fault harness (test/chaos; docs/ha.md, "What each fault
# costs") for CHAOS_DURATION (30m), split between MariaDB 10.11 and MySQL 9.7 (FLAVOR= one of
# them), then TestRabbitClusterNodeStopped. The three-node RabbitMQ cluster that only this target
# starts (scripts/stack.sh rabbit-cluster) is in the draws too. Each schedule prints one line
# (seed, configuration, faults, counts), each flavour a summary; all are printed again at the end.
#   make chaos SEED=N [CONFIG=relaxed/queue/status] [PROFILE=short|long] [FLAVOR=...]   one schedule again
#   make chaos SCENARIO=name|all [FLAVOR=...]   the named regression scenarios (issue 37's loss paths)
# A failed schedule keeps its history, report and relay logs under CHAOS_ARTIFACTS (printed).
CHAOS_DURATION ?= 30m
CHAOS_ARTIFACTS ?= $(or $(TMPDIR),/tmp)/binlog-relay-chaos
export CHAOS_ARTIFACTS
chaos_flavors = $(or $(FLAVOR),mariadb-10.11 mysql-9.7)
chaos_run = $(if $(SEED),-run '^TestChaosReplay$$' -chaos.seed=$(SEED) -chaos.config='$(CONFIG)' -chaos.profile=$(or $(PROFILE),long),$(if $(SCENARIO),-run '^TestChaosScenarios$$' -chaos.scenario='$(SCENARIO)',-run '^TestChaosRandom$$' -chaos.random=$(CHAOS_DURATION) -chaos.split=$(words $(chaos_flavors))))
chaos: stack-up build
	scripts/stack.sh rabbit-cluster
	@mkdir -p $(CHAOS_ARTIFACTS); out=$(CHAOS_ARTIFACTS)/summary-$$(date +%Y%m%d-%H%M%S).txt; rc=0; \
	for f in $(chaos_flavors); do \
	  RELAY_TEST_FLAVOR=$$f $(GO) test -count=1 -v -timeout 0 ./test/chaos/ $(chaos_run) -chaos.rabbit-cluster -chaos.out=$$out || rc=1; \
	done; \
	$(if $(SEED)$(SCENARIO),,$(GO) test -count=1 -v -timeout 10m -run '^TestRabbitClusterNodeStopped$$' ./test/chaos/ -chaos.rabbit-cluster || rc=1;) \
	echo; echo "== make chaos: every schedule and the summaries ($$out)"; cat $$out; exit $$rc

clean:
	rm -rf bin dist
