# xmode: one static binary. `make install` builds and installs it, `make test`
# runs everything CI runs.
PREFIX  ?= /usr/local
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/xmode/xmode/cmd.Version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags '$(LDFLAGS)'

.PHONY: build install test bench lint fuzz

build:
	CGO_ENABLED=0 go build $(GOFLAGS_BUILD) -o bin/xmode ./cmd/xmode

# The stand-in agent and the sample plan go beside it, for the README's
# first `xmode run` (no account needed).
install: build
	install -D -m 0755 bin/xmode $(DESTDIR)$(PREFIX)/bin/xmode
	install -D -m 0755 examples/agent.sh $(DESTDIR)$(PREFIX)/share/xmode/examples/agent.sh
	install -D -m 0644 examples/xmode.yaml $(DESTDIR)$(PREFIX)/share/xmode/examples/xmode.yaml

# The whole suite, race detector on, against the real git binary, real
# processes and (providers/docker) a real Docker daemon.
test: lint
	go test -race -count=1 -timeout 20m ./...

# Benchmarks compare xmode with git/docker side by side in the same run.
bench:
	go test -run '^$$' -bench . -benchtime 20x -timeout 60m ./bench/

lint:
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# A short run of every fuzz target.
fuzz:
	go test ./config -run '^$$' -fuzz FuzzParseSize -fuzztime 20s
	go test ./config -run '^$$' -fuzz FuzzParseDuration -fuzztime 20s
	go test ./store -run '^$$' -fuzz FuzzParseSessionRef -fuzztime 20s
	go test ./storage -run '^$$' -fuzz FuzzResolveWorkdir -fuzztime 20s
	go test ./storage -run '^$$' -fuzz FuzzValidID -fuzztime 20s
