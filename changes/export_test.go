package changes

// SetRacyMargin sets how old a file must be for its hash to be cached, and
// returns the function that restores it.
func SetRacyMargin(ns int64) (restore func()) {
	old := racyMargin
	racyMargin = ns
	return func() { racyMargin = old }
}
