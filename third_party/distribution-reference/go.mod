module github.com/distribution/reference

go 1.20

require github.com/opencontainers/go-digest v1.0.0

// Tested with the patched go-digest beside it, as xmode links them.
replace github.com/opencontainers/go-digest => ../go-digest
