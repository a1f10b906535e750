package main

// grpcio's limits on a request's metadata, applied by the front to every call before it is handled
// (a tap on the server: it reads the headers as received, with no copy), since grpcio never sees the
// headers of the calls the front answers or relays on the link: every call keeps the status it gets
// from Python alone.
//
// grpcio counts each header as name + value + 32 bytes (HTTP/2's header list size) and, by default,
// refuses every request over 16 KiB (its "absolute max metadata size") and a share of those between
// 8 and 16 KiB that grows linearly with the size, both with RESOURCE_EXHAUSTED (grpc core's
// RandomEarlyDetection in the chttp2 HPACK parser; grpc_core::GetSoftLimitFromChannelArgs and
// GetHardLimitFromChannelArgs give the defaults).

import (
	"context"
	"fmt"
	"math/rand/v2"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

const (
	softMetadata = 8192
	// maxMetadata is grpcio's hard limit (it also bounds what the front relays to Python's gRPC socket)
	maxMetadata = 16384
	// fixedHeaders: what every call carries beside its metadata and :path (:method POST,
	// :scheme http, te trailers, grpc-timeout), counted as grpcio counts them
	fixedHeaders = (7 + 4 + 32) + (7 + 4 + 32) + (2 + 8 + 32) + (12 + 8 + 32)
)

func metadataSize(method string, md metadata.MD) int {
	size := fixedHeaders + len(":path") + len(method) + 32
	for k, vs := range md {
		for _, v := range vs {
			size += len(k) + len(v) + 32
		}
	}
	return size
}

// checkMetadata (a grpc.InTapHandle) lets a call through, or answers what grpcio would answer for its
// metadata: RESOURCE_EXHAUSTED.
func checkMetadata(ctx context.Context, info *tap.Info) (context.Context, error) {
	size := metadataSize(info.FullMethodName, info.Header)
	if size <= softMetadata {
		return ctx, nil
	}
	if size > maxMetadata {
		return nil, status.Errorf(codes.ResourceExhausted, "received metadata size exceeds hard limit (%d bytes)", maxMetadata)
	}
	if rand.Float64() < float64(size-softMetadata)/float64(maxMetadata-softMetadata) {
		return nil, status.Error(codes.ResourceExhausted, fmt.Sprintf(
			"received metadata size exceeds soft limit (%d vs. %d), rejecting requests with some random probability",
			size, softMetadata))
	}
	return ctx, nil
}
