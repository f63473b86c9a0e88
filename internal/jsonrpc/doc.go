// Package jsonrpc is a small JSON-RPC 2.0 dispatcher shared by the
// WebSocket binding (/macp/ws, one request per text message) and
// POST /macp/rpc (one request per body): it parses one request, calls the registered method and
// encodes the response. It does no I/O and starts no goroutines; a
// transport reads messages, calls Dispatcher.Handle, and writes what it
// returns.
//
// Batches (JSON arrays) are refused with -32600: MACP needs per-session
// order, which one request per message keeps obvious. A request without
// "id" is a notification and gets no response, even on error, and even
// from a handler that answers later itself (Reply returns nil). Member
// names are exact (case-sensitive): an unknown or case-variant member of
// the request is -32600, of params -32602; a duplicated member, in the
// request or its params, is -32600. A message that is not a valid request
// object gets its error with "id": null, as JSON-RPC 2.0 §5 requires.
package jsonrpc
