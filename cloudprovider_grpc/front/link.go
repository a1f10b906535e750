package main

// The link to Python for the unary calls the front relays: length-prefixed frames on a private unix
// socket, one call at a time per connection, a pool of connections (the frames are described in
// cloudprovider_grpc/front/link.py).
//
// Why not a gRPC client: a relayed call then paid grpc-go's client stack here and grpcio's whole
// server stack in Python, a second gRPC hop as dear as the first; a frame costs one write and one
// read on each side.

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// maxAnswer bounds an answer frame (the largest answers, NodeGroups and NodeGroupNodes at thousands
// of groups or nodes, are a few hundred KB): a longer one is refused, the connection dropped, so a
// corrupt length never makes the front allocate beyond its memory bound.
const maxAnswer = 32 << 20

// pooledAnswer: answers at least this long that are only relayed are read into a buffer of grpc-go's
// pool (NodeGroups at 1,000 groups is 58 KB: a fresh one per call was a tenth of the front's CPU in
// garbage collection)
const pooledAnswer = 16 << 10

// deadlineMargin: the front gives up on Python's answer this long before the caller's deadline and
// answers DEADLINE_EXCEEDED itself. At the deadline grpc-go's server resets the stream (RST_STREAM
// CANCEL), which a caller whose own timer has not fired yet would hear as CANCELLED; grpcio alone lets
// the caller's timer fire, which says DEADLINE_EXCEEDED.
const deadlineMargin = 5 * time.Millisecond

const (
	requestHeader = 10 // u32 length, u16 method, u32 timeout ms
	answerHeader  = 12 // u8 code, u8 flags, i64 version, u16 message length (after the u32 length)

	flagVersion  = 1
	flagStorable = 2
)

type linkAnswer struct {
	code     codes.Code
	message  string
	body     []byte     // the response, unless pooled holds it
	pooled   mem.Buffer // a large response relayed and never cached, in a buffer of grpc-go's pool
	version  int64
	known    bool // the answer carries the provider's state version
	storable bool // and the answer may be cached for it
}

// linkConn is one connection, on a blocking socket the front reads and writes with plain system
// calls. Why not net.UnixConn: a read through Go's network poller parks the goroutine and wakes it
// through epoll and another thread (a futex wake each way), which measured more than the rest of the
// round trip; a blocking read sleeps in the kernel and returns on the same thread. A call is cut off
// (its deadline, the caller gone) by shutting the socket down, which ends the blocked read at once.
type linkConn struct {
	fd     int
	mu     sync.Mutex // closed, against a cut-off running while the connection is closed
	closed bool
	cut    atomic.Int32 // why the call in flight was cut off: cutDeadline or cutCancel
	buf    []byte       // the request frame being written, reused
	head   [4 << 10]byte
}

const (
	cutDeadline = 1
	cutCancel   = 2
)

type link struct {
	path  string
	ids   map[string]uint16 // full method name -> index in Python's table
	slots chan struct{}     // one token per call in flight: never more connections than Python serves
	idle  chan *linkConn
}

func newLink(path string, methods []string, calls int) *link {
	if calls < 1 {
		calls = 1
	}
	l := &link{
		path:  path,
		ids:   make(map[string]uint16, len(methods)),
		slots: make(chan struct{}, calls),
		idle:  make(chan *linkConn, calls),
	}
	for i, m := range methods {
		l.ids[m] = uint16(i)
	}
	return l
}

func (l *link) dial() (*linkConn, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: l.path}); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	return &linkConn{fd: fd}, nil
}

func (lc *linkConn) shut(why int32) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !lc.closed {
		lc.cut.CompareAndSwap(0, why)
		_ = syscall.Shutdown(lc.fd, syscall.SHUT_RDWR)
	}
}

func (lc *linkConn) close() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !lc.closed {
		lc.closed = true
		_ = syscall.Close(lc.fd)
	}
}

// drop closes the idle connections: after the link broke, they are all dead.
func (l *link) drop() {
	for {
		select {
		case lc := <-l.idle:
			lc.close()
		default:
			return
		}
	}
}

// call sends one request to Python and returns its answer; the error is a gRPC status error. A call
// never outlives its context: just before the deadline (or when the caller leaves) the connection is
// shut down and Python's answer, if it ever comes, goes nowhere.
// `pool` says the answer's body is only relayed, never kept: a large one may come in a pooled buffer.
func (l *link) call(ctx context.Context, id uint16, req []byte, pool bool) (*linkAnswer, error) {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-l.slots }()
	var lc *linkConn
	select {
	case lc = <-l.idle:
	default:
		var err error
		if lc, err = l.dial(); err != nil {
			return nil, status.Error(codes.Unavailable, "the Python server cannot be reached: "+err.Error())
		}
	}
	var timeout uint32
	var timer *time.Timer
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline) - deadlineMargin
		if left <= 0 {
			l.idle <- lc
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		timeout = uint32(min((left+time.Millisecond-1)/time.Millisecond, 1<<32-1))
		timer = time.AfterFunc(left, func() { lc.shut(cutDeadline) })
	}
	stop := context.AfterFunc(ctx, func() { lc.shut(cutCancel) })
	a, err := lc.roundTrip(id, timeout, req, pool)
	stop()
	if timer != nil {
		timer.Stop()
	}
	switch why := lc.cut.Load(); {
	case why != 0:
		lc.close()
		if a != nil && a.pooled != nil {
			a.pooled.Free()
		}
		if why == cutDeadline {
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		lc.close()
		var st interface{ GRPCStatus() *status.Status }
		if errors.As(err, &st) {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, "the connection to the Python server broke mid-call: "+err.Error())
	}
	if cap(lc.buf) > 64<<10 {
		lc.buf = nil // a rare large request: its buffer is not kept with the idle connection
	}
	l.idle <- lc
	return a, nil
}

func (lc *linkConn) write(b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(lc.fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// read fills b; at least `least` bytes, and returns how many it read.
func (lc *linkConn) read(b []byte, least int) (int, error) {
	got := 0
	for got < least {
		n, err := syscall.Read(lc.fd, b[got:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			return got, io.ErrUnexpectedEOF
		}
		got += n
	}
	return got, nil
}

func (lc *linkConn) roundTrip(id uint16, timeout uint32, req []byte, pool bool) (*linkAnswer, error) {
	b := lc.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, uint32(requestHeader-4+len(req)))
	b = binary.LittleEndian.AppendUint16(b, id)
	b = binary.LittleEndian.AppendUint32(b, timeout)
	b = append(b, req...)
	lc.buf = b
	if err := lc.write(b); err != nil {
		return nil, err
	}
	// usually the whole answer comes in the first read
	got, err := lc.read(lc.head[:], 4)
	if err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(lc.head[:4]))
	if n > maxAnswer {
		return nil, status.Errorf(codes.ResourceExhausted,
			"the Python server's answer of %d bytes is over the front's limit of %d", n, maxAnswer)
	}
	if n < answerHeader || got > 4+n {
		return nil, status.Errorf(codes.Internal, "malformed answer from the Python server (%d bytes)", n)
	}
	var frame []byte
	var pooled *[]byte
	if pool && n >= pooledAnswer {
		pooled = mem.DefaultBufferPool().Get(n)
		frame = *pooled
	} else {
		frame = make([]byte, n)
	}
	have := copy(frame, lc.head[4:got])
	if have < n {
		if _, err := lc.read(frame[have:], n-have); err != nil {
			if pooled != nil {
				mem.DefaultBufferPool().Put(pooled)
			}
			return nil, err
		}
	}
	code := codes.Code(frame[0])
	flags := frame[1]
	text := int(binary.LittleEndian.Uint16(frame[10:12]))
	if code > codes.Unauthenticated || answerHeader+text > len(frame) {
		if pooled != nil {
			mem.DefaultBufferPool().Put(pooled)
		}
		return nil, status.Errorf(codes.Internal, "malformed answer from the Python server (code %d)", frame[0])
	}
	a := &linkAnswer{
		code:     code,
		message:  string(frame[answerHeader : answerHeader+text]),
		version:  int64(binary.LittleEndian.Uint64(frame[2:10])),
		known:    flags&flagVersion != 0,
		storable: flags&flagStorable != 0,
	}
	if pooled != nil {
		root := mem.NewBuffer(pooled, mem.DefaultBufferPool())
		a.pooled = root.Slice(answerHeader+text, n)
		root.Free() // the slice holds the buffer now
	} else {
		a.body = frame[answerHeader+text:]
	}
	return a, nil
}

// watch keeps one idle connection to Python open and reports when Python closes it (its link server
// stopped, the socket went away): relayed calls then fail at once and health says NOT_SERVING. It
// dials again every 50 ms until the link is back.
func (l *link) watch(report func(down bool, message string)) {
	everUp := false
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: l.path, Net: "unix"})
		if err != nil {
			if everUp {
				report(true, "the Python server's link socket cannot be reached: "+err.Error())
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		everUp = true
		report(false, "")
		var one [1]byte
		_, _ = c.Read(one[:]) // Python never writes on this connection: returns when it closes
		_ = c.Close()
		l.drop()
		report(true, "the Python server closed the link")
	}
}
