// Package datasync flushes a file's data to stable storage without its
// other metadata: fdatasync(2) on Linux (retried on EINTR), fsync
// elsewhere. The benchmark tools use it (cmd/disksync's raw sync rate,
// the durable echo floor in package loadgen); macpd's store syncs through
// Pebble.
package datasync
