package main

// Whether the front reaches the Python server, watched all the time.
//
// Why: if the connection to Python's unix socket breaks and cannot be made again (the socket file
// removed, the directory cleaned away), every relayed call would wait out its deadline while cached
// reads still answered: a silent half-outage. Once the backend has been reached, a connection that
// fails is reported to Python at once (it logs it and turns /healthz 503), relayed calls fail fast
// with UNAVAILABLE, and the gRPC health service answers NOT_SERVING from the front itself. Before the
// first connection (Python's server still starting) calls wait for it within their deadline.

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

type backendWatch struct {
	conn      *grpc.ClientConn
	ctl       *control
	everReady atomic.Bool
	down      atomic.Bool
}

func watchBackend(conn *grpc.ClientConn, ctl *control) *backendWatch {
	b := &backendWatch{conn: conn, ctl: ctl}
	go b.loop()
	return b
}

func (b *backendWatch) isDown() bool { return b.down.Load() }

func (b *backendWatch) loop() {
	ctx := context.Background()
	state := b.conn.GetState()
	for {
		switch state {
		case connectivity.Ready:
			b.everReady.Store(true)
			if b.down.Swap(false) {
				b.ctl.send(event{Ev: "backend", Up: true})
			}
		case connectivity.TransientFailure:
			if b.everReady.Load() && !b.down.Swap(true) {
				b.ctl.send(event{Ev: "backend", Up: false, Message: "the Python server's socket cannot be reached"})
			}
		case connectivity.Idle:
			b.conn.Connect() // a broken connection is made again at once, not on the next call
		case connectivity.Shutdown:
			return
		}
		if !b.conn.WaitForStateChange(ctx, state) {
			return
		}
		state = b.conn.GetState()
	}
}
