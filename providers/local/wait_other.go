//go:build !linux

package local

import "errors"

// waitExitNoReap is not available here: the caller falls back to reaping
// the leader first and killing its group afterwards.
func waitExitNoReap(int) error { return errors.ErrUnsupported }
