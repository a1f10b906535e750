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
	"time"
)

// command is one line from Python. Which fields are set depends on Op.
type command struct {
	Op string `json:"op"` // start, version, closing, stop, tls

	// start
	Listen    string             `json:"listen"`       // public address, as Go's net.Listen takes it
	Backend   string             `json:"backend"`      // unix socket path of the Python gRPC server
	Counters  string             `json:"counters"`     // path of the shared counters file
	Methods   []string           `json:"methods"`      // cacheable full method names, in counter-slot order
	Unary     string             `json:"unary_prefix"` // "/pkg.Service/" whose methods are all unary
	Maps      map[string][][]int `json:"maps"`         // per cacheable method: field-number paths of its map fields
	Buckets   []float64          `json:"buckets"`      // histogram upper bounds, seconds
	MaxEntry  int                `json:"max_entries"`
	MaxBytes  int                `json:"max_bytes"`
	TLSFiles  []string           `json:"tls_files"` // cert, key[, ca]: stat()ed on every handshake
	TLSCert   string             `json:"tls_cert"`  // PEM (start and tls replies)
	TLSKey    string             `json:"tls_key"`
	TLSCA     string             `json:"tls_ca"`
	TLSChange bool               `json:"changed"` // tls reply: a new pair was loaded (false: keep the old one)
	ID        int64              `json:"id"`      // tls reply: the request it answers

	// version: the provider's state version; null = cannot tell (never cache)
	Version *int64 `json:"version"`

	// stop: seconds of grace left for in-flight calls
	Grace float64 `json:"grace"`
}

// event is one line to Python.
type event struct {
	Ev      string `json:"ev"` // ready, error, log, tls, stopped
	Port    int    `json:"port,omitempty"`
	Kind    string `json:"kind,omitempty"`  // error: listen, config
	Level   string `json:"level,omitempty"` // log: info, warning, error
	Message string `json:"message,omitempty"`
	ID      int64  `json:"id,omitempty"` // tls: answer with a tls command carrying this id
}

type control struct {
	in  *bufio.Reader
	out io.Writer
	mu  sync.Mutex // serialises writes: events come from many goroutines

	askMu   sync.Mutex
	nextID  int64
	waiting map[int64]chan command
}

func newControl(in io.Reader, out io.Writer) *control {
	return &control{in: bufio.NewReaderSize(in, 1<<16), out: out, waiting: map[int64]chan command{}}
}

func (c *control) send(e event) {
	line, _ := json.Marshal(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.out.Write(append(line, '\n'))
}

func (c *control) log(level, message string) {
	c.send(event{Ev: "log", Level: level, Message: message})
}

// read returns the next command; on EOF (Python is gone) the process exits at once.
func (c *control) read() command {
	for {
		line, err := c.in.ReadBytes('\n')
		if err != nil {
			os.Exit(0) // EOF or a broken pipe: the Python process is gone, release the port now
		}
		var cmd command
		if json.Unmarshal(line, &cmd) != nil {
			c.log("warning", "front: unreadable control line ignored")
			continue
		}
		return cmd
	}
}

// ask sends a request event and waits up to `limit` for Python's reply (a command with the same id);
// ok is false when no reply came in time.
func (c *control) ask(e event, limit time.Duration) (command, bool) {
	c.askMu.Lock()
	c.nextID++
	id := c.nextID
	reply := make(chan command, 1)
	c.waiting[id] = reply
	c.askMu.Unlock()
	defer func() {
		c.askMu.Lock()
		delete(c.waiting, id)
		c.askMu.Unlock()
	}()
	e.ID = id
	c.send(e)
	select {
	case cmd := <-reply:
		return cmd, true
	case <-time.After(limit):
		return command{}, false
	}
}

// answer routes a reply command to the ask() waiting for it (late replies are dropped).
func (c *control) answer(cmd command) {
	c.askMu.Lock()
	reply, ok := c.waiting[cmd.ID]
	c.askMu.Unlock()
	if ok {
		reply <- cmd
	}
}
