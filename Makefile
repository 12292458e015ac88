# xmode: one static binary. `make install` builds and installs it, `make test`
# runs everything CI runs.
PREFIX  ?= /usr/local
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/xmode/xmode/cmd.Version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags '$(LDFLAGS)'

.PHONY: build install docs test bench lint fuzz

build:
	CGO_ENABLED=0 go build $(GOFLAGS_BUILD) -o bin/xmode ./cmd/xmode

# The binary, shell completions (bash, zsh, fish), man pages, and the
# stand-in agent and sample plan for the README's first `xmode run`.
install: build
	install -D -m 0755 bin/xmode $(DESTDIR)$(PREFIX)/bin/xmode
	mkdir -p bin/completions bin/man
	bin/xmode completion bash > bin/completions/xmode.bash
	bin/xmode completion zsh > bin/completions/_xmode
	bin/xmode completion fish > bin/completions/xmode.fish
	install -D -m 0644 bin/completions/xmode.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/xmode
	install -D -m 0644 bin/completions/_xmode $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_xmode
	install -D -m 0644 bin/completions/xmode.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/xmode.fish
	go run ./internal/clidocs/gen -man bin/man
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0644 bin/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -D -m 0755 examples/agent.sh $(DESTDIR)$(PREFIX)/share/xmode/examples/agent.sh
	install -D -m 0644 examples/xmode.yaml $(DESTDIR)$(PREFIX)/share/xmode/examples/xmode.yaml

# The CLI reference in docs/cli, from the command tree (a test fails when
# it is stale).
docs:
	go run ./internal/clidocs/gen -markdown docs/cli

# The whole suite, race detector on, against the real git binary, real
# processes and (providers/docker) a real Docker daemon; then the patched
# dependencies' own tests (third_party/README.md; ./third_party checks
# each is upstream's release plus its patch).
test: lint
	go test -race -count=1 -timeout 20m ./...
	for m in third_party/*/; do (cd $$m && go vet ./... && go test -count=1 ./...) || exit 1; done

# Benchmarks compare xmode with git/docker side by side in the same run.
bench:
	go test -run '^$$' -bench . -benchtime 20x -timeout 60m ./bench/

lint:
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# A short run of every fuzz target. A pack or a delta input is kilobytes,
# and minimising one would take the whole run: -fuzzminimizetime bounds it.
fuzz:
	go test ./config -run '^$$' -fuzz FuzzParseSize -fuzztime 20s
	go test ./config -run '^$$' -fuzz FuzzParseDuration -fuzztime 20s
	go test ./store -run '^$$' -fuzz FuzzParseSessionRef -fuzztime 20s
	go test ./fsguard -run '^$$' -fuzz FuzzResolveWorkdir -fuzztime 20s
	go test ./fsguard -run '^$$' -fuzz FuzzValidID -fuzztime 20s
	go test ./gitread -run '^$$' -fuzz '^FuzzPackObject$$' -fuzztime 20s -fuzzminimizetime 5s
	go test ./gitread -run '^$$' -fuzz '^FuzzApplyDelta$$' -fuzztime 20s -fuzzminimizetime 5s
	go test ./gitread -run '^$$' -fuzz '^FuzzParseIndex$$' -fuzztime 20s
	go test ./gitread -run '^$$' -fuzz '^FuzzParseTree$$' -fuzztime 20s
	go test ./gitread -run '^$$' -fuzz '^FuzzParseCommit$$' -fuzztime 20s
	go test ./gitread -run '^$$' -fuzz '^FuzzWildmatch$$' -fuzztime 20s
	go test ./egress -run '^$$' -fuzz '^FuzzParseRule$$' -fuzztime 20s
	go test ./egress -run '^$$' -fuzz '^FuzzMatch$$' -fuzztime 20s
