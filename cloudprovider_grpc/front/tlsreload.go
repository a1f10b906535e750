package main

// TLS termination with certificate files the front loads and re-reads itself.
//
// Why here and not through Python: a rotation must never depend on a round trip to a process that
// may be paused or busy (a handshake waiting on it would wait too, and an answer arriving late was
// lost). Python checks the files once at start, for a clear error before anything listens; from
// then on the front stat()s them on every handshake (as grpcio's fetch callback does) and, when their
// modification times changed, loads and checks the new set before the handshake continues. A set
// that does not load, or whose key does not belong to its certificate (a rotation half done), is
// refused once, with a log line naming the file, and the previous pair stays in use; the next change
// is tried again.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

type certs struct {
	ctl   *control
	files []string // cert, key[, ca]

	mu    sync.Mutex
	stamp string // modification times of the files last looked at (loaded or refused)
	cfg   *tls.Config
}

func stamp(files []string) string {
	var b strings.Builder
	for _, p := range files {
		info, err := os.Stat(p)
		if err != nil {
			return ""
		}
		fmt.Fprintf(&b, "%d;", info.ModTime().UnixNano())
	}
	return b.String()
}

// loadFiles reads and checks cert, key and (when given) the client CA bundle; errors name the file.
func loadFiles(files []string) (*tls.Config, error) {
	if len(files) < 2 {
		return nil, errors.New("the certificate and key files are required")
	}
	read := func(setting, path string) ([]byte, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: cannot read %s: %v", setting, path, unwrapPathError(err))
		}
		return data, nil
	}
	certPEM, err := read("cert", files[0])
	if err != nil {
		return nil, err
	}
	keyPEM, err := read("key", files[1])
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return nil, fmt.Errorf("key: %s does not belong to the certificate in %s", files[1], files[0])
		}
		return nil, fmt.Errorf("key: %s and %s are not a usable PEM pair (%v)", files[1], files[0], err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // grpc-go refuses connections without ALPN h2
	}
	if len(files) > 2 && files[2] != "" {
		caPEM, err := read("ca", files[2])
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("ca: %s holds no PEM certificate", files[2])
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func newCerts(ctl *control, files []string) (*certs, error) {
	now := stamp(files)
	cfg, err := loadFiles(files)
	if err != nil {
		return nil, err
	}
	return &certs{ctl: ctl, files: files, stamp: now, cfg: cfg}, nil
}

// forHandshake is tls.Config.GetConfigForClient: the current pair, reloaded first when the files
// changed since the last look. Loading takes a few hundred microseconds, once per change.
func (c *certs) forHandshake(*tls.ClientHelloInfo) (*tls.Config, error) {
	now := stamp(c.files)
	c.mu.Lock()
	defer c.mu.Unlock()
	if now != "" && now != c.stamp {
		c.stamp = now // looked at once per change: a refused set is not retried until it changes again
		cfg, err := loadFiles(c.files)
		if err != nil {
			c.ctl.log("error", "changed TLS files rejected, the previous certificate stays in use: "+err.Error())
		} else {
			c.cfg = cfg
			c.ctl.log("info", "TLS certificate files changed and were loaded; new handshakes use them")
		}
	}
	return c.cfg, nil
}
