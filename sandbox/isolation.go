package sandbox

import (
	"github.com/xmode/xmode/engine"
	"github.com/xmode/xmode/store"
)

// IsolationGaps is what the session's sandbox lacks of an isolated,
// bounded one, in words for the user (engine.IsolationGaps), as its engine
// makes sandboxes under the service's configuration; none when its engine
// cannot be opened.
func (s *Service) IsolationGaps(sess *store.Session) []string {
	provider, err := engine.Open(sess.Engine, s.Cfg)
	if err != nil {
		return nil
	}
	defer engine.Close(provider)
	return engine.IsolationGaps(provider)
}

// RunsImage reports whether a new sandbox's engine runs an image
// (engine.Image), so that choosing one means something; the cloud engine
// runs nothing here, and an engine that cannot be opened says nothing.
func (s *Service) RunsImage() bool {
	name, err := engine.Choose(s.Cfg.RunnerMode, s.Cfg.Engine)
	if err != nil || name == engine.Cloud {
		return false
	}
	provider, err := engine.Open(name, s.Cfg)
	if err != nil {
		return false
	}
	defer engine.Close(provider)
	_, ok := engine.Image(provider)
	return ok
}
