// Package clikit is the command-line plumbing shared by macpctl (the MACP
// client) and macpbench (the benchmark and load tools): a program is a
// list of subcommands; each invocation gets a [CLI] with its flag set, the
// connection flags every subcommand takes (--addr, --agent, --token,
// --insecure, TLS, --timeout; they may also precede the subcommand's
// name; an --addr without a port means port 50051, see [DialAddr]), a dialer for the SDK client built from them, and one exit-status
// contract: 0 ok, 1 the runtime rejected the request (or could not be
// reached; the MACP code goes to stderr as "error: CODE: message", with a
// hint when the likely fix is known), 2 a usage error.
//
// It links only the SDK and the generated protos: no server, admin
// endpoint or metrics (internal/lint checks macpctl's dependencies).
package clikit
