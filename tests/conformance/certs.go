package main

// Test PKI for the mTLS checks: one CA, a server certificate valid only for the DNS name the
// cloud-config's address uses (so CA's ServerName = host-of-address rule is what makes the handshake
// succeed), a client certificate from the same CA, and a second, untrusted CA's client certificate.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

var serial int64

func issue(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	parentCert, parentKey := tmpl, key
	if parent != nil {
		parentCert, parentKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, parentKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, der: der}, nil
}

func newCA(name string) (*keyPair, error) {
	return issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
}

func (kp *keyPair) write(dir, name string) error {
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.der})
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM, 0o600); err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600)
}

// writeTestPKI writes ca, server (SAN: serverName only), client, and rogue-client (other CA).
func writeTestPKI(dir, serverName string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := newCA("conformance test CA")
	if err != nil {
		return err
	}
	server, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "cloudprovider-grpc conformance server"},
		DNSNames:    []string{serverName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca)
	if err != nil {
		return err
	}
	client, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "cluster-autoscaler"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca)
	if err != nil {
		return err
	}
	rogueCA, err := newCA("untrusted CA")
	if err != nil {
		return err
	}
	rogue, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "rogue client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, rogueCA)
	if err != nil {
		return err
	}
	for name, kp := range map[string]*keyPair{"ca": ca, "server": server, "client": client, "rogue-client": rogue} {
		if err := kp.write(dir, name); err != nil {
			return err
		}
	}
	return nil
}
