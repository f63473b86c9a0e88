//go:build race

package sdk_test

// raceEnabled: under the race detector the projection property runs
// fewer histories by default (it is ~10x slower); .ci/run also runs the
// full count without it.
const raceEnabled = true
