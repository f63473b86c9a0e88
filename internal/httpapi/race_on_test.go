//go:build race

package httpapi_test

// raceEnabled: the stream-memory tests write less history under the race
// detector (encoding and decoding a 1 MB record is ~10x slower there);
// the bound they check is the same.
const raceEnabled = true
