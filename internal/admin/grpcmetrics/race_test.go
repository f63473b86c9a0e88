//go:build race

package grpcmetrics

const raceEnabled = true
