package main

// Counters of the calls the front answers itself, in a file Python created and both processes map.
//
// Why a shared file: the Prometheus page is Python's (one port, one registry, the same names, labels,
// buckets and HELP as before). Python reads these slots at scrape time and adds its own tallies of the
// calls it handled; the front never counts a forwarded call, so nothing is counted twice. Atomic adds
// on shared memory cost nanoseconds, where a message per call over the control pipe would cost a
// system call each.
//
// Layout (little-endian uint64 words), one slot per (cacheable method, gRPC code 0..16):
//
//	[count, sum of durations in ns, bucket 0 .. bucket N-1, +Inf bucket]
//
// Bucket i counts the calls whose duration is <= bound i and > bound i-1 (not cumulative; Python
// accumulates when it renders the histogram).

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"
)

const numCodes = 17

type counters struct {
	words  []uint64
	bounds []time.Duration
	slot   int
}

func openCounters(path string, methods int, buckets []float64) (*counters, error) {
	bounds := make([]time.Duration, len(buckets))
	for i, b := range buckets {
		bounds[i] = time.Duration(b * float64(time.Second))
	}
	slot := 2 + len(bounds) + 1
	size := methods * numCodes * slot * 8
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() < int64(size) {
		return nil, fmt.Errorf("counters file %s holds %d bytes, %d needed", path, info.Size(), size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&data[0])), size/8)
	return &counters{words: words, bounds: bounds, slot: slot}, nil
}

func (c *counters) observe(method int, code codes.Code, d time.Duration) {
	if int(code) >= numCodes {
		code = codes.Unknown
	}
	base := (method*numCodes + int(code)) * c.slot
	atomic.AddUint64(&c.words[base], 1)
	atomic.AddUint64(&c.words[base+1], uint64(d))
	i := 0
	for i < len(c.bounds) && d > c.bounds[i] {
		i++
	}
	atomic.AddUint64(&c.words[base+2+i], 1)
}
