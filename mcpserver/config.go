package mcpserver

import (
	"github.com/xmode/xmode/config"
	"github.com/xmode/xmode/fail"
	"github.com/xmode/xmode/sandbox"
)

// What `xmode mcp` configures differently from the CLI: sandboxes an
// agent's client makes are hardened unless the user opted out.

// HardenedByDefault is the setting `xmode mcp` turns on unless the user
// set it: a docker sandbox in bind mode gets every limit (network none
// included) and the hardening (docs/docker.md), as in volume mode. An
// agent's user does not watch each command; a sandbox called hardened must
// be. XMODE_SANDBOX_BIND_HARDENED=0 opts out, and sandbox_create's
// warnings then say what the sandbox lacks.
const HardenedByDefault = "XMODE_SANDBOX_BIND_HARDENED"

// ConfigDefaults are the overrides `xmode mcp` loads its configuration
// with, env being its environment: XMODE_SANDBOX_BIND_HARDENED=1 unless
// it is set (to anything: 0 opts out).
func ConfigDefaults(env config.Env) map[string]config.Flag {
	ov := map[string]config.Flag{}
	if env(HardenedByDefault) == "" {
		ov[HardenedByDefault] = config.Flag{Name: "xmode mcp (its default)", Value: "1"}
	}
	return ov
}

// createConfig is the server's configuration with sandbox_create's
// overrides (its image, its network), an image refused when new sandboxes
// run none.
func (s *Server) createConfig(ov map[string]config.Flag, image string) (*config.Config, error) {
	if s.o.LoadConfig == nil {
		return nil, fail.Failedf("this server cannot choose an image or a network per sandbox")
	}
	cfg, err := s.o.LoadConfig(ov)
	if err != nil {
		return nil, err
	}
	if ok, _ := sandbox.RunsImage(cfg); image != "" && !ok {
		return nil, fail.Usagef("image %q: this server's sandboxes run on the host, which runs no image; the user sets XMODE_SANDBOX_ENGINE=docker and XMODE_RUNNER_MODE=cloud_worker for the server to get docker sandboxes", image)
	}
	return cfg, nil
}
