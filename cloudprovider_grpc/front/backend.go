package main

// Whether the front reaches the Python server, watched all the time, on both of Python's sockets: the
// link (unary calls, see link.go) and the gRPC socket (the streaming calls: health Watch, reflection).
//
// Why: if a connection to Python breaks and cannot be made again (the socket file removed, the
// directory cleaned away), every relayed call would wait out its deadline while cached reads still
// answered: a silent half-outage. Once a socket has been reached, a connection that fails is reported
// to Python at once (it logs it and turns /healthz 503), relayed calls fail fast with UNAVAILABLE,
// and the gRPC health service answers NOT_SERVING from the front itself. Before the first connection
// (Python's server still starting) calls wait for it within their deadline.

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

type backendWatch struct {
	ctl      *control
	mu       sync.Mutex
	grpcDown bool
	linkDown bool
	down     atomic.Bool // either is down
}

func newBackendWatch(ctl *control) *backendWatch { return &backendWatch{ctl: ctl} }

func (b *backendWatch) isDown() bool { return b.down.Load() }

// set records one socket's state; Python hears of a change of the whole (down when either is down).
func (b *backendWatch) set(which *bool, down bool, message string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*which = down
	now := b.grpcDown || b.linkDown
	if b.down.Swap(now) != now {
		b.ctl.send(event{Ev: "backend", Up: !now, Message: message})
	}
}

func (b *backendWatch) link(down bool, message string) { b.set(&b.linkDown, down, message) }

// grpc follows the gRPC connection's state.
func (b *backendWatch) grpc(conn *grpc.ClientConn) {
	ctx := context.Background()
	everReady := false
	state := conn.GetState()
	for {
		switch state {
		case connectivity.Ready:
			everReady = true
			b.set(&b.grpcDown, false, "")
		case connectivity.TransientFailure:
			if everReady {
				b.set(&b.grpcDown, true, "the Python server's gRPC socket cannot be reached")
			}
		case connectivity.Idle:
			conn.Connect() // a broken connection is made again at once, not on the next call
		case connectivity.Shutdown:
			return
		}
		if !conn.WaitForStateChange(ctx, state) {
			return
		}
		state = conn.GetState()
	}
}
