package server

import (
	"context"

	macpv1 "github.com/macpd/macpd/gen/macp/v1"
	"github.com/macpd/macpd/internal/coord"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Undecodable requests (checklist ERR-*; docs/security.md "Limits"): a
// request whose bytes are not its message (invalid wire format, a string
// field that is not UTF-8, the wrong message) is the client's error.
// grpc-go reports every decoding failure as INTERNAL ("failed to
// unmarshal"), before any interceptor runs, so the server decodes with
// requestCodec instead: on failure it leaves the message empty but for a
// marker (an unknown field, undecodableField, carrying the decoder's
// error), and reports success; the interceptors (decodeUnary,
// decodeStream) and StreamSession find the marker and answer
// INVALID_ARGUMENT with the MACP code INVALID_ENVELOPE (in-stream on
// StreamSession, which stays open, as for any rejected frame).

// undecodableField is the field number of the marker: the largest valid
// one, unused by every macp.v1 message.
const undecodableField protowire.Number = protowire.MaxValidNumber

// requestCodec is grpc-go's proto codec with the decoding failure kept in
// the message instead of returned.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec {
	return requestCodec{encoding.GetCodecV2("proto")}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	proto.Reset(m)
	marker := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	marker = protowire.AppendString(marker, err.Error())
	m.ProtoReflect().SetUnknown(marker)
	return nil
}

// undecodable returns the decoding error requestCodec kept in m, if any.
func undecodable(m any) (string, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return "", false
	}
	raw := pm.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return "", false
		}
		raw = raw[n:]
		if num == undecodableField && typ == protowire.BytesType {
			v, n := protowire.ConsumeString(raw)
			if n < 0 {
				return "", false
			}
			return v, true
		}
		n = protowire.ConsumeFieldValue(num, typ, raw)
		if n < 0 {
			return "", false
		}
		raw = raw[n:]
	}
	return "", false
}

// undecodableErr is the error for an undecodable request.
func undecodableErr(why string) *coord.Error {
	return coord.Errorf(coord.CodeInvalidEnvelope, "the request could not be decoded as its protobuf message: %s", why)
}

// decodeUnary refuses undecodable unary requests with INVALID_ARGUMENT.
func (s *Service) decodeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if why, bad := undecodable(req); bad {
		return nil, statusErr(undecodableErr(why))
	}
	return h(ctx, req)
}

// decodeStream refuses undecodable messages of streaming calls with
// INVALID_ARGUMENT, except on StreamSession, which answers them in-stream.
func (s *Service) decodeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod == macpv1.MACPRuntimeService_StreamSession_FullMethodName {
		return h(srv, ss)
	}
	return h(srv, &decodeCheckedStream{ss})
}

type decodeCheckedStream struct{ grpc.ServerStream }

func (d *decodeCheckedStream) RecvMsg(m any) error {
	if err := d.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if why, bad := undecodable(m); bad {
		return statusErr(undecodableErr(why))
	}
	return nil
}
