package sandbox

import (
	"github.com/xmode/xmode/egress"
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/fail"
)

// egressPolicy is a new sandbox's egress policy when its network is
// proxied (XMODE_SANDBOX_NETWORK=allow or open; docs/network.md): the
// front ends' sources first (flags, a plan, an agent), configuration's
// last, as egress.Merge orders them. nil for any other network. A rule
// that does not parse is a usage error naming its source.
func (s *Service) egressPolicy(sessionID string, sources []egress.Source) (*egress.Policy, error) {
	mode, proxied := s.Cfg.EgressMode()
	if !proxied {
		if len(sources) > 0 {
			return nil, fail.Usagef("network rules (%s) need a network with a policy: XMODE_SANDBOX_NETWORK=allow or open", sources[0].Name)
		}
		return nil, nil
	}
	p, err := egress.Merge(sessionID, mode, append(append([]egress.Source(nil), sources...), s.Cfg.EgressSources()...)...)
	if err != nil {
		return nil, fail.As(fail.Usage, err)
	}
	return &p, nil
}

// checkEgress refuses a policy the session's engine cannot enforce (the
// host's; the cloud's), before anything exists.
func checkEgress(pol *egress.Policy, engineName string, provider engine.Provider) error {
	if pol == nil {
		return nil
	}
	return engine.CheckEgress(provider, engineName, pol.Mode)
}
