package caclient

// The one connection a CA process keeps to the provider, opened from its cloud-config.
//
// Facts (externalgrpc_cloud_provider.go at cluster-autoscaler-1.25.0 through -1.36.1): without a
// `cert` key the connection is plaintext; with one, the client presents the cert/key pair, trusts
// only `cacert`, and expects the server's certificate to name the host part of `address`. The dial
// is lazy (a refused handshake surfaces at the first call) and otherwise uses grpc-go's defaults,
// among them the 4 MiB limit on a received message and no retry policy.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
)

// pemFiles are the three files mutual TLS needs, loaded together so one error names the one missing.
type pemFiles struct {
	cert, key, authority []byte
}

func (c *CloudConfig) loadPEM() (pemFiles, error) {
	var out pemFiles
	for _, f := range []struct {
		role, path string
		into       *[]byte
	}{
		{"client certificate (cert)", c.ClientCert, &out.cert},
		{"client key (key)", c.ClientKey, &out.key},
		{"server authority (cacert)", c.ServerCA, &out.authority},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return pemFiles{}, fmt.Errorf("cloud-config names a %s that cannot be read: %w", f.role, err)
		}
		*f.into = b
	}
	return out, nil
}

// Credentials is the transport the cloud-config asks for.
func (c *CloudConfig) Credentials() (credentials.TransportCredentials, error) {
	serverName, _, err := net.SplitHostPort(c.Address)
	if err != nil {
		return nil, fmt.Errorf("cloud-config address %q is not host:port: %w", c.Address, err)
	}
	if c.ClientCert == "" {
		return insecure.NewCredentials(), nil
	}
	files, err := c.loadPEM()
	if err != nil {
		return nil, err
	}
	identity, err := tls.X509KeyPair(files.cert, files.key)
	if err != nil {
		return nil, fmt.Errorf("client certificate and key do not form a pair: %w", err)
	}
	trusted := x509.NewCertPool()
	if !trusted.AppendCertsFromPEM(files.authority) {
		return nil, fmt.Errorf("no PEM certificate found in the server authority file %s", c.ServerCA)
	}
	return credentials.NewTLS(&tls.Config{
		ServerName:   serverName,
		Certificates: []tls.Certificate{identity},
		RootCAs:      trusted,
	}), nil
}

// Dial opens the connection with the cloud-config's transport, or with `override` when it is set.
// CA hands the whole address to grpc.Dial (externalgrpc_cloud_provider.go:409 at
// cluster-autoscaler-1.36.1, and the same call since 1.25.0), so the target is what grpc.Dial makes
// of it: see dialTarget.
func (c *CloudConfig) Dial(override credentials.TransportCredentials) (*grpc.ClientConn, error) {
	transport := override
	if transport == nil {
		var err error
		if transport, err = c.Credentials(); err != nil {
			return nil, err
		}
	}
	conn, err := grpc.NewClient(dialTarget(c.Address), grpc.WithTransportCredentials(transport))
	if err != nil {
		return nil, fmt.Errorf("no gRPC channel to %s: %w", c.Address, err)
	}
	return conn, nil
}

// dialTarget is the target grpc.Dial resolves `address` as: an address whose scheme names a
// registered resolver goes to that resolver as it is (`unix:///PATH` and `unix:/PATH` to grpc-go's
// built-in unix resolver), any other goes to the dialer unresolved (passthrough, grpc.Dial's default
// scheme; grpc-go clientconn.go parseTargetAndFindResolver, v1.81.1). With TLS the server name stays
// the host part net.SplitHostPort gives (Credentials): for a unix socket, the literal `unix`.
func dialTarget(address string) string {
	if u, err := url.Parse(address); err == nil && u.Scheme != "" && resolver.Get(u.Scheme) != nil {
		return address
	}
	return "passthrough:///" + address
}
