package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/xmode/xmode/providers/docker/dockertest"
)

// dockerEnv is a rig's environment for docker sandboxes in bind mode.
func dockerEnv(t *testing.T) []string {
	t.Helper()
	dockertest.Require(t)
	return []string{"XMODE_SANDBOX_ENGINE=docker", "XMODE_RUNNER_MODE=cloud_worker", "XMODE_SANDBOX_IMAGE=" + dockertest.Image(t),
		"XMODE_SANDBOX_DOCKER_HOST=" + dockertest.Host()}
}

// A docker sandbox made through MCP is hardened though the user set
// nothing but the engine (bind mode, which the CLI leaves light): the
// container, as the daemon has it, drops every capability, has
// no-new-privileges and limits, and no network; a command in it has no
// capability and cannot gain privileges; sandbox_create warns of nothing.
// With XMODE_SANDBOX_BIND_HARDENED=0, the user's explicit opt-out, the
// warnings say plainly what it lacks.
func TestMCPDockerSandboxIsHardened(t *testing.T) {
	t.Parallel()
	cli := dockertest.Require(t)
	r := newMCPRig(t, dockerEnv(t)...)
	cs := r.stdio(nil, nil)
	made := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo})
	id := str(made, "session", "id")
	if w := str(made, "warnings"); w != "[]" {
		t.Errorf("a hardened sandbox's warnings: %s", w)
	}
	inspect := func(id string) (capDrop, secOpt []string, mem, cpus int64, pids int64, network string) {
		t.Helper()
		var shown struct {
			ContainerID string `json:"container_id"`
		}
		json.Unmarshal([]byte(r.cliOut(nil, "sandbox", "show", id, "--json")), &shown)
		ci, err := cli.ContainerInspect(context.Background(), shown.ContainerID)
		if err != nil {
			t.Fatalf("inspect the container of %s (%q): %v", id, shown.ContainerID, err)
		}
		hc := ci.HostConfig
		if hc.PidsLimit != nil {
			pids = *hc.PidsLimit
		}
		return hc.CapDrop, hc.SecurityOpt, hc.Memory, hc.NanoCPUs, pids, string(hc.NetworkMode)
	}
	capDrop, secOpt, mem, cpus, pids, network := inspect(id)
	if !slices.Equal(capDrop, []string{"ALL"}) || !slices.Contains(secOpt, "no-new-privileges") || mem <= 0 || cpus <= 0 || pids <= 0 || network != "none" {
		t.Fatalf("the MCP sandbox's container: cap-drop %v, security-opt %v, memory %d, nano-cpus %d, pids %d, network %q", capDrop, secOpt, mem, cpus, pids, network)
	}
	st := ok(t, cs, "sandbox_exec", map[string]any{"session": id, "command": "grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status"})
	if out := str(st, "stdout"); !strings.Contains(out, "CapEff:\t0000000000000000") || !strings.Contains(out, "CapPrm:\t0000000000000000") || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("a command in the MCP sandbox: %q", out)
	}

	// Opted out: what it lacks, said plainly.
	soft := r.stdio(nil, []string{"XMODE_SANDBOX_BIND_HARDENED=0"})
	made = ok(t, soft, "sandbox_create", map[string]any{"repository": r.repo})
	w := str(made, "warnings")
	for _, want := range []string{"lacks network isolation", "docker's default bridge", "lacks limits: XMODE_SANDBOX_CPUS, XMODE_SANDBOX_MEMORY, XMODE_SANDBOX_PIDS_LIMIT", "lacks hardening", "XMODE_SANDBOX_BIND_HARDENED=1"} {
		if !strings.Contains(w, want) {
			t.Errorf("an unhardened sandbox's warnings lack %q: %s", want, w)
		}
	}
	if capDrop, secOpt, _, _, _, _ := inspect(str(made, "session", "id")); len(capDrop) != 0 || slices.Contains(secOpt, "no-new-privileges") {
		t.Errorf("the opted-out sandbox: cap-drop %v, security-opt %v (the warnings describe another)", capDrop, secOpt)
	}
}

// sandbox_create's image: the sandbox runs it; one the daemon cannot get
// is refused with a message naming XMODE_SANDBOX_IMAGE and the image
// parameter; on the host, image is refused.
func TestMCPCreateImage(t *testing.T) {
	t.Parallel()
	env := dockerEnv(t)
	img := dockertest.Image(t)
	// The server's own default cannot be pulled (a registry on a closed
	// loopback port): only the parameter makes a sandbox.
	r := newMCPRig(t, append(env, "XMODE_SANDBOX_IMAGE=127.0.0.1:1/xmode-test-absent:1")...)
	cs := r.stdio(nil, nil)
	made := ok(t, cs, "sandbox_create", map[string]any{"repository": r.repo, "image": img})
	var shown struct {
		Image string `json:"image"`
	}
	json.Unmarshal([]byte(r.cliOut(nil, "sandbox", "show", str(made, "session", "id"), "--json")), &shown)
	if shown.Image != img {
		t.Fatalf("the sandbox's image %q, want %q", shown.Image, img)
	}
	for _, args := range []map[string]any{{"repository": r.repo}, {"repository": r.repo, "image": "127.0.0.1:1/xmode-test-absent:2"}} {
		res, _ := call(t, cs, "sandbox_create", args)
		if msg := text(res); !res.IsError || !strings.Contains(msg, "the sandbox engine is unavailable: image 127.0.0.1:1/xmode-test-absent") ||
			!strings.Contains(msg, "XMODE_SANDBOX_IMAGE") || !strings.Contains(msg, "sandbox_create's image parameter") {
			t.Errorf("an image that cannot be pulled (%v): %s", args, msg)
		}
	}
	host := newMCPRig(t)
	toolErr(t, host.stdio(nil, nil), "sandbox_create", map[string]any{"repository": host.repo, "image": img}, "invalid input: image \""+img+"\": this server's sandboxes run on the host")
}
