// Package fencegrpc carries fences across gRPC: the client interceptor sends
// the fence.Token of a call's context in metadata, and the server interceptor
// checks it with a fence.Checker, failing a stale one with
// codes.FailedPrecondition before the handler runs.
package fencegrpc

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/fence"
)

// The metadata keys that carry a fence (gRPC lowercases keys).
const (
	MetadataFence = "distlock-fence"
	MetadataKey   = "distlock-fence-key"
)

// UnaryClientInterceptor adds the token of each call's context
// (fence.NewContext) to its outgoing metadata. Calls without one pass
// unchanged.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if t, ok := fence.FromContext(ctx); ok {
			key, f := fence.FormatToken(t)
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key, MetadataFence, f)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// UnaryServerInterceptor checks the fence metadata of each call with c: a
// stale fence fails with codes.FailedPrecondition, malformed metadata with
// codes.InvalidArgument, a failing check with codes.Unavailable; an accepted
// token is in the handler's context (fence.FromContext). Calls without fence
// metadata pass unchecked.
func UnaryServerInterceptor(c fence.Checker) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		keys, fences := md.Get(MetadataKey), md.Get(MetadataFence)
		if len(keys) == 0 && len(fences) == 0 {
			return handler(ctx, req)
		}
		if len(keys) != 1 || len(fences) != 1 {
			return nil, status.Errorf(codes.InvalidArgument, "fence: want one %s and one %s, got %d and %d", MetadataKey, MetadataFence, len(keys), len(fences))
		}
		t, err := fence.ParseToken(keys[0], fences[0])
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		switch err := c.Check(ctx, t); {
		case errors.Is(err, fence.ErrStale):
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		case err != nil:
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		return handler(fence.NewContext(ctx, t), req)
	}
}
