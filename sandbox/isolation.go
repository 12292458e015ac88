package sandbox

import (
	"github.com/xmode/xmode/config"
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

// RunsImage reports whether the engine a new sandbox gets under cfg runs
// an image (engine.Image), so that choosing one means something; the cloud
// engine runs nothing here. An engine that cannot be opened is the error.
func RunsImage(cfg *config.Config) (bool, error) {
	name, err := engine.Choose(cfg.RunnerMode, cfg.Engine)
	if err != nil || name == engine.Cloud {
		return false, err
	}
	provider, err := engine.Open(name, cfg)
	if err != nil {
		return false, err
	}
	defer engine.Close(provider)
	_, ok := engine.Image(provider)
	return ok, nil
}
