package main

import (
	"testing"

	"github.com/macpd/macpd/internal/clikit/clitest"
)

// newRunner runs macpbench in-process with env as its environment.
func newRunner(t *testing.T, env map[string]string) clitest.Runner {
	return clitest.Runner{T: t, Name: "macpbench", Main: run, Env: env}
}
