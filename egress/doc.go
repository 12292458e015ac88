// Package egress is a sandbox's way out: an HTTP(S) proxy and a DNS
// resolver that let through only what the sandbox's policy allows, record
// every decision, and add credentials at the edge so that a secret never
// enters the sandbox (docs/network.md).
//
// A policy (Policy) is a mode — none, open or allow — and rules (Rule),
// each remembering its source, merged from configuration, an agent's
// definition, a plan and flags (Merge). One proxy process (Serve, run as
// the hidden `xmode __egress`) serves many sandboxes from a configuration
// directory, each on listeners of its own, so a client is known by the
// listener it reached. The proxy is github.com/elazarl/goproxy with its
// sharp edges wrapped (proxy.go); the resolver github.com/miekg/dns.
//
// Nothing here knows an engine: the engine that wires a sandbox to its
// proxy fills in the addresses to listen on and what to block besides
// DefaultBlock (its bridge gateway, the proxy's own networks).
package egress
