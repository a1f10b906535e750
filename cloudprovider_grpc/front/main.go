// Command cpg-front is cloudprovider-grpc's compiled front: it owns the public gRPC port and answers
// the RPCs cluster-autoscaler asks per node (NodeGroupGetOptions, NodeGroupForNode,
// NodeGroupTargetSize) from a cache of the Python server's own answers, valid for one state version
// of the provider; every other call is relayed to the Python server on private unix sockets (the
// unary ones as frames on a link of their own, see link.go).
//
// Why: CA calls those three RPCs about 5,000 times a loop at 1,000 nodes, serially, and on
// a node CA shares with us the server's CPU per call is loop time. grpcio alone costs 200-430 us of
// CPU per call on the development VM, a canned-reply grpc-go server 70-145 us; our Python handlers
// cost 3-21 us of that. No change on the Python side could come near grpc-go's floor, so the calls
// that dominate are answered here, by grpc-go, and Python keeps every decision: each cached answer is
// one Python gave, stored only for the state version it was computed at.
//
// It is started by the Python process (cloudprovider_grpc/front/process.py), never by hand: the
// configuration comes as the first JSON line on stdin and the pipe stays open as the control channel
// (see control.go). The front exits as soon as stdin reaches EOF.
package main

import (
	"crypto/tls"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // grpcio servers accept gzip-compressed calls; so does the front
	"google.golang.org/grpc/grpclog"
)

// maxRequest matches grpcio's default receive limit (4 MiB), so the front refuses exactly what the
// Python server refused before.
const maxRequest = 4 << 20

func main() {
	// grpc-go's own log lines would bypass Python's log format and secret redaction
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	// Python decides when the front stops (the stop command, or EOF on stdin): a Ctrl-C at a terminal
	// reaches the whole process group, and the front must not drop the port before Python's graceful
	// shutdown has let the calls in flight finish
	signal.Ignore(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// an event written after Python died must fail (and the front clean up and exit, see
	// control.gone), not kill the process with SIGPIPE before it removed the private directory
	signal.Ignore(syscall.SIGPIPE)
	ctl := newControl(os.Stdin, os.Stdout)
	start := ctl.read()
	ctl.dir = start.Dir
	if start.MemoryLimit > 0 {
		// the cache's own bound counts what it holds; this makes the collector return the garbage
		// that requests and answers leave (without it the heap may grow to twice the live bytes)
		debug.SetMemoryLimit(start.MemoryLimit)
	}
	if start.Op != "start" {
		ctl.send(event{Ev: "error", Kind: "config", Message: "the first control line must be start"})
		os.Exit(2)
	}
	counters, err := openCounters(start.Counters, len(start.Methods), start.Buckets)
	if err != nil {
		ctl.send(event{Ev: "error", Kind: "config", Message: "counters: " + err.Error()})
		os.Exit(2)
	}
	backend, err := grpc.NewClient(
		"unix://"+start.Backend,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(rawCodec{}),
			grpc.MaxCallRecvMsgSize(math.MaxInt32),
			// while Python's server is still starting (its first Refresh), calls wait for it within
			// their deadline, as they waited on grpcio's bound but not yet started port before
			grpc.WaitForReady(true),
		),
	)
	if err != nil {
		ctl.send(event{Ev: "error", Kind: "config", Message: "backend: " + err.Error()})
		os.Exit(2)
	}
	backend.Connect()
	watch := newBackendWatch(ctl)
	go watch.grpc(backend)
	l := newLink(start.Link, start.LinkMethods, start.LinkCalls)
	go l.watch(watch.link)
	f := &front{
		backend:  backend,
		link:     l,
		watch:    watch,
		maxKey:   start.MaxKey,
		cache:    newCache(len(start.Methods), start.MaxEntry, start.MaxBytes),
		counters: counters,
		routes:   map[string]route{},
	}
	for m, id := range l.ids {
		f.routes[m] = route{id: id, slot: -1}
	}
	for i, m := range start.Methods {
		if r, ok := f.routes[m]; ok {
			r.slot, r.keys = i, newMapPaths(start.Maps[m])
			f.routes[m] = r
		}
	}
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(f.handle),
		grpc.MaxRecvMsgSize(maxRequest),
		grpc.InTapHandle(checkMetadata),
		// calls run on a few long-lived goroutines instead of a new one each: a new goroutine's stack
		// grows (and is copied) through grpc-go's call path on every call, measurable in a profile of
		// the cached answers
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
	if len(start.TLSFiles) > 0 {
		c, err := newCerts(ctl, start.TLSFiles)
		if err != nil {
			ctl.send(event{Ev: "error", Kind: "config", Message: "TLS: " + err.Error()})
			os.Exit(2)
		}
		base := &tls.Config{GetConfigForClient: c.forHandshake, MinVersion: tls.VersionTLS12}
		opts = append(opts, grpc.Creds(credentials.NewTLS(base)))
	}
	lis, err := listen(start.Network, start.Listen, os.FileMode(start.SocketMode))
	if err != nil {
		ctl.send(event{Ev: "error", Kind: "listen", Message: err.Error()})
		os.Exit(1)
	}
	server := grpc.NewServer(opts...)
	go func() { _ = server.Serve(lis) }()
	port := 0 // a unix socket has none
	if a, ok := lis.Addr().(*net.TCPAddr); ok {
		port = a.Port
	}
	ctl.send(event{Ev: "ready", Port: port})

	for {
		cmd := ctl.read()
		switch cmd.Op {
		case "version":
			if cmd.Version == nil {
				f.cache.unknown()
			} else {
				f.cache.raise(*cmd.Version)
			}
		case "closing":
			f.cache.close()
			ctl.send(event{Ev: "closing"}) // the acknowledgement Python's shutdown waits for
		case "stop":
			f.cache.close()
			stop(server, time.Duration(cmd.Grace*float64(time.Second)))
			_ = backend.Close()
			ctl.send(event{Ev: "stopped"})
			os.Exit(0)
		}
	}
}

// stop lets the calls in flight finish for at most `grace`, then cuts what still runs.
func stop(server *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		server.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		server.Stop()
		<-done
	}
}
