package main

// TLS termination with the certificate Python hands over, re-checked on every handshake.
//
// Python stays the authority on certificate files: it loads them, checks that the key belongs to the
// certificate and logs a rejected rotation, exactly as with grpcio's dynamic credentials. The front
// only notices that the files changed (their modification times, stat()ed per handshake like
// grpcio's fetch callback does) and asks Python, waiting for the answer, so the very handshake after
// a rotation already uses the new pair; a rejected rotation keeps the previous pair.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// askLimit bounds how long a handshake waits for Python to load rotated files.
const askLimit = 2 * time.Second

type certs struct {
	ctl   *control
	files []string

	mu    sync.Mutex
	stamp string
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

func serverConfig(certPEM, keyPEM, caPEM string) (*tls.Config, error) {
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"}, // grpc-go refuses connections without ALPN h2
	}
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("no certificate in the client CA bundle")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

func newCerts(ctl *control, start command) (*certs, error) {
	cfg, err := serverConfig(start.TLSCert, start.TLSKey, start.TLSCA)
	if err != nil {
		return nil, err
	}
	return &certs{ctl: ctl, files: start.TLSFiles, stamp: stamp(start.TLSFiles), cfg: cfg}, nil
}

// forHandshake is tls.Config.GetConfigForClient: the current pair, reloaded through Python first
// when the files changed since the last look.
func (c *certs) forHandshake(*tls.ClientHelloInfo) (*tls.Config, error) {
	now := stamp(c.files)
	c.mu.Lock()
	defer c.mu.Unlock()
	if now != "" && now != c.stamp {
		c.stamp = now // asked once per change: a rejected set is not asked about again
		reply, ok := c.ctl.ask(event{Ev: "tls"}, askLimit)
		switch {
		case !ok:
			c.ctl.log("warning", "front: no answer about the changed TLS files in time; the previous certificate stays in use")
		case reply.TLSChange:
			cfg, err := serverConfig(reply.TLSCert, reply.TLSKey, reply.TLSCA)
			if err != nil {
				c.ctl.log("error", "front: the reloaded TLS files could not be used, the previous certificate stays in use: "+err.Error())
			} else {
				c.cfg = cfg
			}
		}
	}
	return c.cfg, nil
}
