//go:build race

package httpapi_test

// raceEnabled: the stream-memory heap tests measure the production build
// only (see their comments); .ci/run runs them without -race.
const raceEnabled = true
