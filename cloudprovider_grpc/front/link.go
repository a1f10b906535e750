package main

// The link to Python for the unary calls the front relays: length-prefixed frames on a private unix
// socket, one call at a time per connection, a pool of connections (the frames are described in
// cloudprovider_grpc/front/link.py).
//
// Why not a gRPC client: a relayed call then paid grpc-go's client stack here and grpcio's whole
// server stack in Python, a second gRPC hop as dear as the first; a frame costs one write and one
// read on each side.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxAnswer bounds an answer frame (the largest answers, NodeGroups and NodeGroupNodes at thousands
// of groups or nodes, are a few hundred KB): a longer one is refused, the connection dropped, so a
// corrupt length never makes the front allocate beyond its memory bound.
const maxAnswer = 32 << 20

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
	body     []byte
	version  int64
	known    bool // the answer carries the provider's state version
	storable bool // and the answer may be cached for it
}

type linkConn struct {
	c   *net.UnixConn
	r   *bufio.Reader
	buf []byte // the request frame being written, reused
}

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
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: l.path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	return &linkConn{c: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// drop closes the idle connections: after the link broke, they are all dead.
func (l *link) drop() {
	for {
		select {
		case lc := <-l.idle:
			_ = lc.c.Close()
		default:
			return
		}
	}
}

// call sends one request to Python and returns its answer; the error is a gRPC status error. A call
// never outlives its context: at the deadline (or when the caller leaves) the connection is closed
// and Python's answer, if it ever comes, goes nowhere.
func (l *link) call(ctx context.Context, id uint16, req []byte) (*linkAnswer, error) {
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
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		deadline = deadline.Add(-deadlineMargin)
		left := time.Until(deadline)
		if left <= 0 {
			l.idle <- lc
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		timeout = uint32(min((left+time.Millisecond-1)/time.Millisecond, 1<<32-1))
	}
	_ = lc.c.SetDeadline(deadline) // the zero time (no deadline) clears it
	stop := context.AfterFunc(ctx, func() { _ = lc.c.SetDeadline(time.Unix(1, 0)) })
	a, err := lc.roundTrip(id, timeout, req)
	if !stop() || ctx.Err() != nil {
		_ = lc.c.Close()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		_ = lc.c.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
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

func (lc *linkConn) roundTrip(id uint16, timeout uint32, req []byte) (*linkAnswer, error) {
	b := lc.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, uint32(requestHeader-4+len(req)))
	b = binary.LittleEndian.AppendUint16(b, id)
	b = binary.LittleEndian.AppendUint32(b, timeout)
	b = append(b, req...)
	lc.buf = b
	if _, err := lc.c.Write(b); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(lc.r, size[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(size[:])
	if n > maxAnswer {
		return nil, status.Errorf(codes.ResourceExhausted,
			"the Python server's answer of %d bytes is over the front's limit of %d", n, maxAnswer)
	}
	if n < answerHeader {
		return nil, status.Errorf(codes.Internal, "malformed answer from the Python server (%d bytes)", n)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(lc.r, frame); err != nil {
		return nil, err
	}
	code := codes.Code(frame[0])
	flags := frame[1]
	text := int(binary.LittleEndian.Uint16(frame[10:12]))
	if code > codes.Unauthenticated || answerHeader+text > len(frame) {
		return nil, status.Errorf(codes.Internal, "malformed answer from the Python server (code %d)", frame[0])
	}
	return &linkAnswer{
		code:     code,
		message:  string(frame[answerHeader : answerHeader+text]),
		body:     frame[answerHeader+text:],
		version:  int64(binary.LittleEndian.Uint64(frame[2:10])),
		known:    flags&flagVersion != 0,
		storable: flags&flagStorable != 0,
	}, nil
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
