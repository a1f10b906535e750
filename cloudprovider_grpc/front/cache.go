package main

// The answer cache: (method, request bytes) -> the answer Python gave, valid for exactly one state
// version of the provider.
//
// Why this is correct without knowing the schema: the three cached RPCs are pure functions of the
// request and the provider's state, and the provider's state version changes whenever any of their
// answers could change. Python reads the version before and after computing a read answer and sends
// it in the trailer, marked storable only when both were equal (the answer then belongs to that
// version); the front stores it only while that version is still its current one. Every reply, writes
// and Refresh included, carries the version after the call ran, and the front raises its version on
// receipt, before the caller sees the reply: a serial caller (CA) never reads older state than a
// previous call showed. Changes made in the background (a worker finishing) arrive over the control
// channel a few milliseconds later.

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// entryOverhead is what one entry costs beyond its bytes: the map slot, the key's string header, the
// answer struct and its status; so that maxBytes bounds what the process really holds.
const entryOverhead = 256

type answer struct {
	body []byte         // the response, when code is OK
	err  *status.Status // the status otherwise
	code codes.Code
}

type cache struct {
	mu         sync.Mutex
	version    int64                // the provider's state version; -1: unknown, nothing is cached
	closing    bool                 // shutdown began: everything goes to Python, whose gate answers UNAVAILABLE
	entries    []map[string]*answer // per cacheable method (its counter slot): request key -> answer
	bytes      int
	count      int
	maxEntries int
	maxBytes   int
}

func newCache(methods, maxEntries, maxBytes int) *cache {
	c := &cache{version: -1, entries: make([]map[string]*answer, methods), maxEntries: maxEntries, maxBytes: maxBytes}
	for i := range c.entries {
		c.entries[i] = map[string]*answer{}
	}
	return c
}

// get: the answer stored for method `slot` and request key `k`. Keyed by a map per method and looked
// up with the key bytes as they are: no key is built per call (Go does not copy []byte for a map
// index), the lookup allocates nothing.
func (c *cache) get(slot int, k []byte) *answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil
	}
	return c.entries[slot][string(k)]
}

// raise moves the current version forward to v (versions only grow); older news is ignored.
func (c *cache) raise(v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v > c.version {
		c.version = v
		c.clear()
	}
}

// unknown: the provider cannot tell its version any more; nothing is cached until it can.
func (c *cache) unknown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version = -1
	c.clear()
}

func (c *cache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	c.clear()
}

// put stores an answer computed at version v, only while v is still current.
func (c *cache) put(slot int, k []byte, v int64, a *answer) {
	size := len(k) + len(a.body) + entryOverhead
	if a.err != nil {
		size += len(a.err.Message())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || v != c.version || v < 0 || size > c.maxBytes {
		return
	}
	// bounded so that a client sending endless distinct requests cannot grow memory: cleared when
	// full (CA asks a fixed set of requests per version, far below the bounds)
	if c.count >= c.maxEntries || c.bytes+size > c.maxBytes {
		c.clear()
	}
	if _, ok := c.entries[slot][string(k)]; !ok {
		c.entries[slot][string(k)] = a
		c.bytes += size
		c.count++
	}
}

func (c *cache) clear() {
	for i, m := range c.entries {
		if len(m) > 0 {
			c.entries[i] = map[string]*answer{}
		}
	}
	c.bytes = 0
	c.count = 0
}
