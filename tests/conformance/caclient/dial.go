package caclient

// The cloud-config file and the connection CA derives from it.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// DefaultGRPCTimeout is the deadline of every call when the cloud-config names none.
const DefaultGRPCTimeout = 5 * time.Second

// CloudConfig holds exactly the keys of CA's externalgrpc cloud-config (YAML read through its JSON
// tags, as sigs.k8s.io/yaml does).
type CloudConfig struct {
	Address     string           `json:"address"`
	Key         string           `json:"key"`
	Cert        string           `json:"cert"`
	Cacert      string           `json:"cacert"`
	GRPCTimeout *metav1.Duration `json:"grpc_timeout,omitempty"`
}

// ReadCloudConfig parses a cloud-config file.
func ReadCloudConfig(path string) (*CloudConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("could not open cloud provider configuration file %q: %w", path, err)
	}
	var c CloudConfig
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("can't parse YAML: %w", err)
	}
	return &c, nil
}

// Timeout is the per-call deadline.
func (c *CloudConfig) Timeout() time.Duration {
	if c.GRPCTimeout != nil {
		return c.GRPCTimeout.Duration
	}
	return DefaultGRPCTimeout
}

// TransportCredentials are what CA dials with: no `cert` means a plaintext connection; with `cert`,
// mutual TLS with the client pair from `cert`/`key`, the server verified against `cacert` (which is
// then required) under ServerName = the host part of `address`.
func (c *CloudConfig) TransportCredentials() (credentials.TransportCredentials, error) {
	host, _, err := net.SplitHostPort(c.Address)
	if err != nil {
		return nil, fmt.Errorf("failed to parse address: %w", err)
	}
	if c.Cert == "" {
		return insecure.NewCredentials(), nil
	}
	certPEM, err := os.ReadFile(c.Cert)
	if err != nil {
		return nil, fmt.Errorf("could not open Cert configuration file %q: %w", c.Cert, err)
	}
	keyPEM, err := os.ReadFile(c.Key)
	if err != nil {
		return nil, fmt.Errorf("could not open Key configuration file %q: %w", c.Key, err)
	}
	caPEM, err := os.ReadFile(c.Cacert)
	if err != nil {
		return nil, fmt.Errorf("could not open Cacert configuration file %q: %w", c.Cacert, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to parse cert key pair: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("failed to parse ca %q", c.Cacert)
	}
	return credentials.NewTLS(&tls.Config{ServerName: host, Certificates: []tls.Certificate{pair}, RootCAs: pool}), nil
}

// Dial opens the one connection CA keeps: lazily connected (the first RPC reports a refused
// handshake, as with grpc.Dial), the address passed through unresolved, grpc-go's defaults otherwise
// (4 MiB receive limit, no retries configured).
func (c *CloudConfig) Dial(override credentials.TransportCredentials) (*grpc.ClientConn, error) {
	creds := override
	if creds == nil {
		var err error
		if creds, err = c.TransportCredentials(); err != nil {
			return nil, err
		}
	}
	conn, err := grpc.NewClient("passthrough:///"+c.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("failed to dial server: %w", err)
	}
	return conn, nil
}
