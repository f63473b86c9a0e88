// Package soak holds the bounded soak test of issue #6: an abusive client
// and a well-behaved client against one macpd at once (soak_test.go). It
// runs in `make test` (about 20 s, also under -race) and is skipped with
// -short.
package soak
