//go:build race

package server_test

// raceEnabled: the stream-memory heap tests measure the production build
// only (see their comments); .ci/run runs them without -race.
const raceEnabled = true
