package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"unicode/utf8"
)

// Version is the only "jsonrpc" value accepted.
const Version = "2.0"

// Standard error codes (JSON-RPC 2.0 §5.1).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Request is one decoded request or notification.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// IsNotification reports whether r expects no response.
func (r *Request) IsNotification() bool { return len(r.ID) == 0 }

// Error is a JSON-RPC error object.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Response is a response object; exactly one of Result and Error is set.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Notification is a server-to-client notification.
type Notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// Handler runs one method. It returns the result or an error; a handler
// that answers later itself (Reply) returns Deferred.
type Handler func(ctx context.Context, req *Request) (any, *Error)

// deferred marks a response the handler sends itself.
type deferred struct{}

// Deferred is returned by a handler that replies later with Reply (so that
// its response is ordered with messages it sends itself).
var Deferred any = deferred{}

// Dispatcher maps method names to handlers. Register before use; Handle
// may then be called concurrently.
type Dispatcher struct {
	methods map[string]Handler
}

// New returns an empty dispatcher.
func New() *Dispatcher { return &Dispatcher{methods: make(map[string]Handler)} }

// Register adds a method.
func (d *Dispatcher) Register(method string, h Handler) { d.methods[method] = h }

// Handle processes one message and returns the encoded response, or nil
// when none is due (a notification, or a Deferred reply).
func (d *Dispatcher) Handle(ctx context.Context, msg []byte) []byte {
	if !utf8.Valid(msg) {
		return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeParseError, Message: "the message is not valid UTF-8"}})
	}
	t := bytes.TrimLeft(msg, " \t\r\n")
	if len(t) > 0 && t[0] == '[' {
		return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeInvalidRequest, Message: "batches are not supported: send one request per message"}})
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(msg))
	if err := dec.Decode(&req); err != nil || dec.More() {
		m := "the message is not one JSON-RPC 2.0 request object"
		if err != nil {
			m += ": " + err.Error()
		}
		return encode(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeParseError, Message: m}})
	}
	id := req.ID
	if len(id) == 0 {
		id = null
	}
	if req.JSONRPC != Version || req.Method == "" || !validID(req.ID) {
		if req.IsNotification() && req.JSONRPC == Version {
			return nil
		}
		return encode(Response{JSONRPC: Version, ID: id, Error: &Error{Code: CodeInvalidRequest, Message: `a request needs "jsonrpc": "2.0", a "method" and a string or number "id"`}})
	}
	h, ok := d.methods[req.Method]
	if !ok {
		if req.IsNotification() {
			return nil
		}
		return encode(Response{JSONRPC: Version, ID: id, Error: &Error{Code: CodeMethodNotFound, Message: "unknown method " + req.Method}})
	}
	res, jerr := h(ctx, &req)
	if req.IsNotification() || (jerr == nil && res == Deferred) {
		return nil
	}
	if jerr != nil {
		return encode(Response{JSONRPC: Version, ID: id, Error: jerr})
	}
	return encode(Response{JSONRPC: Version, ID: id, Result: res})
}

var null = json.RawMessage("null")

// validID: absent, a string or a number (JSON-RPC 2.0 §4).
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// Reply encodes the response to a request whose handler returned Deferred.
func Reply(req *Request, result any, err *Error) []byte {
	r := Response{JSONRPC: Version, ID: req.ID}
	if err != nil {
		r.Error = err
	} else {
		r.Result = result
	}
	return encode(r)
}

// Notify encodes a notification.
func Notify(method string, params any) []byte {
	return encode(Notification{JSONRPC: Version, Method: method, Params: params})
}

// Params decodes req.Params into dst strictly (unknown fields are
// errors); a missing params object is an error too.
func Params(req *Request, dst any) *Error {
	if len(req.Params) == 0 {
		return &Error{Code: CodeInvalidParams, Message: req.Method + " needs a params object"}
	}
	dec := json.NewDecoder(bytes.NewReader(req.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return &Error{Code: CodeInvalidParams, Message: "invalid params for " + req.Method + ": " + err.Error()}
	}
	return nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(Response{JSONRPC: Version, ID: null, Error: &Error{Code: CodeInternalError, Message: "the response could not be encoded"}})
	}
	return b
}
