package main

// Every call: the unary methods Python serves on the link (the CloudProvider service, the health check)
// go over it (link.go), the three cacheable ones answered from the cache when they can and remembered;
// everything else (health Watch, reflection streams) is relayed to Python's gRPC socket as a generic
// bidirectional stream. The front knows no schema: requests and responses are bytes.

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// versionKey is the trailer in which Python sends the provider's state version.
const versionKey = "cpg-state-version"

// rawCodec passes message bytes through untouched, in both directions: a message is a *[]byte, or (to
// send) a mem.Buffer from grpc-go's buffer pool, which grpc-go returns to the pool once it is written
// (a large answer relayed from Python is read into one: no garbage per call). Unmarshal takes the one
// copy grpc-go's buffers need, as they are reused once it returns.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(mem.Buffer); ok {
		return mem.BufferSlice{b}, nil
	}
	return mem.BufferSlice{mem.SliceBuffer(*(v.(*[]byte)))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

type front struct {
	backend  *grpc.ClientConn // Python's gRPC socket: the streaming calls
	link     *link            // Python's link: the unary calls
	watch    *backendWatch
	maxKey   int // requests longer than this are forwarded, never cached (CA's are a few hundred bytes)
	cache    *cache
	counters *counters
	routes   map[string]route // full method name -> how the link serves it
}

// route: a method served on the link: its index there and, for a cacheable one, its counter slot
// (-1 otherwise) and its request's map fields (see canonical.go).
type route struct {
	id   uint16
	slot int
	keys *mapPaths
}

// Only these outcomes are cached: Python logs none of them (it logs UNAVAILABLE and INTERNAL), and
// INVALID_ARGUMENT must reach Python every time so malformed bodies keep their rate-limited warning.
func cacheableCode(c codes.Code) bool {
	return c == codes.OK || c == codes.NotFound || c == codes.Unimplemented
}

func (f *front) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	if f.watch.isDown() && strings.HasPrefix(method, healthPrefix) {
		return f.notServing(method, stream)
	}
	if r, ok := f.routes[method]; ok {
		return f.unary(method, r, stream)
	}
	return f.relay(method, stream)
}

// outgoing: the caller's metadata passed on to Python (the deadline travels with the context).
func outgoing(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	for _, k := range []string{":authority", "content-type", "user-agent", "te", "grpc-timeout"} {
		delete(md, k)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// observe reads the state version from Python's trailer and raises the front's to it. The answer may
// be stored (ok) only for "N"; "N!" says the state moved while the answer was computed (or the RPC is
// not a cacheable read): raise, but do not store.
func (f *front) observe(trailer metadata.MD) (version int64, ok bool) {
	vals := trailer.Get(versionKey)
	if len(vals) == 0 {
		return 0, false
	}
	text, store := strings.CutSuffix(vals[0], "!")
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, false
	}
	f.cache.raise(v)
	return v, !store
}

func withoutVersion(md metadata.MD) metadata.MD {
	if len(md.Get(versionKey)) == 0 {
		return md
	}
	md = md.Copy()
	delete(md, versionKey)
	return md
}

// unary forwards one unary call over the link; for a cacheable method (slot >= 0) it answers from the
// cache when it can and remembers Python's answer when it may.
func (f *front) unary(method string, r route, stream grpc.ServerStream) error {
	start := time.Now()
	slot := r.slot
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		if errors.Is(err, io.EOF) { // a unary call without its request message: as grpcio answers it
			return status.Error(codes.Unimplemented, zeroMessages)
		}
		return err
	}
	if len(req) > f.maxKey {
		slot = -1 // a hostile size: never held in the cache (its counter slot counts cached answers only)
	}
	var key []byte
	if slot >= 0 {
		key = r.keys.key(req)
		if a := f.cache.get(slot, key); a != nil {
			var err error
			if a.err != nil {
				err = a.err.Err()
			} else {
				err = stream.SendMsg(&a.body)
			}
			f.counters.observe(slot, a.code, time.Since(start))
			return err
		}
	}
	if f.watch.isDown() {
		return status.Error(codes.Unavailable, "the Python server cannot be reached")
	}
	a, err := f.link.call(stream.Context(), r.id, req, slot < 0)
	if err != nil {
		return err
	}
	if a.pooled != nil {
		if a.code == codes.OK {
			return stream.SendMsg(a.pooled) // grpc-go frees it
		}
		a.pooled.Free()
	}
	if a.known {
		// before the caller hears the answer: a serial caller never reads older state afterwards
		f.cache.raise(a.version)
	}
	var st *status.Status
	if a.code != codes.OK {
		st = status.New(a.code, a.message)
	}
	if a.known && a.storable && slot >= 0 && cacheableCode(a.code) {
		f.cache.put(slot, key, a.version, &answer{code: a.code, body: a.body, err: st})
	}
	if st != nil {
		return st.Err()
	}
	return stream.SendMsg(&a.body)
}

var streamDesc = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// relay forwards one call of any shape to Python and its messages, headers, trailers and status back.
func (f *front) relay(method string, ss grpc.ServerStream) error {
	ctx, cancel := context.WithCancel(outgoing(ss.Context()))
	defer cancel()
	cs, err := f.backend.NewStream(ctx, streamDesc, method, f.callOptions()...)
	if err != nil {
		return fromBackend(err).Err()
	}
	go func() { // caller -> Python
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if cs.SendMsg(&m) != nil {
				return // the Python side ended the call; its status comes through RecvMsg below
			}
		}
	}()
	headerSent := false
	for { // Python -> caller
		var m []byte
		err := cs.RecvMsg(&m)
		if err != nil {
			trailer := cs.Trailer()
			f.observe(trailer)
			if !headerSent {
				if h, herr := cs.Header(); herr == nil && len(h) > 0 {
					_ = ss.SendHeader(h)
				}
			}
			ss.SetTrailer(withoutVersion(trailer))
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fromBackend(err).Err()
		}
		if !headerSent {
			headerSent = true
			if h, herr := cs.Header(); herr == nil && len(h) > 0 {
				if ss.SendHeader(h) != nil {
					return status.Error(codes.Canceled, "the caller went away")
				}
			}
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

// zeroMessages is grpcio's answer to a unary call that ends without its request message.
const zeroMessages = `"b''" requires exactly one request message.`

// callOptions: once the connection to Python has failed, calls fail at once (UNAVAILABLE) instead of
// waiting out their deadline for a socket that may never come back.
func (f *front) callOptions(more ...grpc.CallOption) []grpc.CallOption {
	if f.watch.isDown() {
		return append(more, grpc.WaitForReady(false))
	}
	return more
}

// fromBackend is the status to give the caller for a call Python's server did not complete. Metadata
// over grpcio's hard limit is refused by grpc-go before it is sent (INTERNAL, "header list size to
// send violates the maximum size"); Python alone answers that request RESOURCE_EXHAUSTED, so the
// caller gets that here too.
func fromBackend(err error) *status.Status {
	st := status.Convert(err)
	if st.Code() == codes.Internal && strings.Contains(st.Message(), "header list size to send violates") {
		return status.New(codes.ResourceExhausted,
			"received metadata size exceeds hard limit ("+strconv.Itoa(maxMetadata)+" bytes)")
	}
	return st
}

const healthPrefix = "/grpc.health.v1.Health/"

// notServingBody is grpc.health.v1.HealthCheckResponse{status: NOT_SERVING} (field 1, varint 2).
var notServingBody = []byte{0x08, 0x02}

// notServing answers the health service while Python cannot be reached: Check says NOT_SERVING;
// Watch says it once and ends with UNAVAILABLE when Python is reachable again (the client watches anew
// and hears Python's own status) or when the caller leaves.
func (f *front) notServing(method string, stream grpc.ServerStream) error {
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.Unimplemented, zeroMessages)
		}
		return err
	}
	body := notServingBody
	if err := stream.SendMsg(&body); err != nil {
		return err
	}
	if !strings.HasSuffix(method, "/Watch") {
		return nil
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for f.watch.isDown() {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-tick.C:
		}
	}
	return status.Error(codes.Unavailable, "the server is reachable again; watch again")
}
