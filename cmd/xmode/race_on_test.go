//go:build race

package main

// raceBuild: this test binary (and so every xmode it runs) has the race
// detector, which multiplies memory and time.
const raceBuild = true
