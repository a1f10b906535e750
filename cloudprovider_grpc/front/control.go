package main

// The control channel to the Python process: JSON lines on stdin (commands) and stdout (events).
//
// Why stdin/stdout: the pipe is the one link that ends when the Python process ends, however it ends
// (kill -9 included): EOF on stdin makes the front exit at once, so it never outlives Python and
// never holds the public port for a dead server.

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"sync"
)

// command is one line from Python. Which fields are set depends on Op.
type command struct {
	Op string `json:"op"` // start, version, closing, stop

	// start
	Listen      string             `json:"listen"`       // public address, as Go's net.Listen takes it
	Network     string             `json:"network"`      // tcp, or unix (Listen is then the socket's path)
	SocketMode  uint32             `json:"socket_mode"`  // unix: the socket file's permission bits
	Backend     string             `json:"backend"`      // unix socket path of the Python gRPC server (streams)
	Link        string             `json:"link"`         // unix socket path of Python's link (unary calls)
	LinkMethods []string           `json:"link_methods"` // full method names served on the link, by index
	LinkCalls   int                `json:"link_calls"`   // calls in flight on the link at most
	Dir         string             `json:"dir"`          // the private directory shared with Python (see read)
	Counters    string             `json:"counters"`     // path of the shared counters file
	Methods     []string           `json:"methods"`      // cacheable full method names, in counter-slot order
	Maps        map[string][][]int `json:"maps"`         // per cacheable method: field-number paths of its map fields
	Buckets     []float64          `json:"buckets"`      // histogram upper bounds, seconds
	MaxEntry    int                `json:"max_entries"`
	MaxBytes    int                `json:"max_bytes"`
	MaxKey      int                `json:"max_key"`      // requests longer than this are never cached
	MemoryLimit int64              `json:"memory_limit"` // the Go runtime's soft memory limit, bytes
	TLSFiles    []string           `json:"tls_files"`    // cert, key[, ca]: loaded here, re-read when they change

	// version: the provider's state version; null = cannot tell (never cache)
	Version *int64 `json:"version"`

	// stop: seconds of grace left for in-flight calls
	Grace float64 `json:"grace"`
}

// event is one line to Python.
type event struct {
	Ev      string `json:"ev"` // ready, error, log, backend, closing (acknowledged), stopped
	Port    int    `json:"port,omitempty"`
	Kind    string `json:"kind,omitempty"`  // error: listen, config
	Level   string `json:"level,omitempty"` // log: info, warning, error
	Message string `json:"message,omitempty"`
	Up      bool   `json:"up,omitempty"` // backend: whether the front reaches Python's socket
}

type control struct {
	in  *bufio.Reader
	out io.Writer
	mu  sync.Mutex // serialises writes: events come from many goroutines
	// dir is removed when Python is gone (EOF): the temporary directory is removed by whichever
	// process outlives the other (Python removes it after a stop or when the front died)
	dir string
}

func newControl(in io.Reader, out io.Writer) *control {
	return &control{in: bufio.NewReaderSize(in, 1<<16), out: out}
}

func (c *control) send(e event) {
	line, _ := json.Marshal(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.out.Write(append(line, '\n')); err != nil {
		c.gone() // a broken pipe: Python is gone (main ignores SIGPIPE, so the write fails instead)
	}
}

// gone: the Python process is gone (even after kill -9); release the port now and remove what the
// two shared.
func (c *control) gone() {
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	os.Exit(0)
}

func (c *control) log(level, message string) {
	c.send(event{Ev: "log", Level: level, Message: message})
}

// read returns the next command; on EOF (Python is gone) the process exits at once.
func (c *control) read() command {
	for {
		line, err := c.in.ReadBytes('\n')
		if err != nil {
			c.gone() // EOF or a broken pipe
		}
		var cmd command
		if json.Unmarshal(line, &cmd) != nil {
			c.log("warning", "front: unreadable control line ignored")
			continue
		}
		return cmd
	}
}
