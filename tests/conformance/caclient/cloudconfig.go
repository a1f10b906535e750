package caclient

// The cloud-config file a CA process is started with (--cloud-config), read the way each client
// generation reads it. The file is part of the interface: its keys are `address` (host:port of the
// provider), `cert`, `key` and `cacert` (paths to the client's certificate and key and to the
// authority that signed the server's certificate) and, from 1.29.0, `grpc_timeout` (a Go duration
// string); externalgrpc_cloud_provider.go at cluster-autoscaler-1.28.7 and -1.29.0 declare them.

import (
	"fmt"
	"os"
	"time"

	yamlv2 "gopkg.in/yaml.v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ConfigDialect is one way of turning the cloud-config file into settings.
type ConfigDialect int

const (
	// DialectYAMLv2 decodes with gopkg.in/yaml.v2 on `yaml` struct tags: keys match exactly, and the
	// file has no timeout key (CA 1.25-1.28).
	DialectYAMLv2 ConfigDialect = iota
	// DialectJSONTags decodes with sigs.k8s.io/yaml, which converts the YAML to JSON and decodes that
	// on `json` struct tags (so keys match case-insensitively, as encoding/json does), with
	// `grpc_timeout` as a Kubernetes duration (CA 1.29 and later).
	DialectJSONTags
)

func (d ConfigDialect) String() string {
	if d == DialectYAMLv2 {
		return "gopkg.in/yaml.v2"
	}
	return "sigs.k8s.io/yaml"
}

// fixedTimeout is every call's deadline when the cloud-config does not set one, and always before
// 1.29.0.
const fixedTimeout = 5 * time.Second

// DefaultGRPCTimeout is the deadline of every call when nothing else sets one.
const DefaultGRPCTimeout = fixedTimeout

// CloudConfig is what a client takes from its cloud-config file.
type CloudConfig struct {
	Address    string        // host:port the client dials; its host is also the TLS server name
	ClientCert string        // path of the client certificate; empty means a plaintext connection
	ClientKey  string        // path of the client certificate's key
	ServerCA   string        // path of the authority the server's certificate must chain to
	Deadline   time.Duration // grpc_timeout; zero when the file does not set it
	// DeadlineSet: the file sets grpc_timeout, which CA 1.29 and later then use as given, zero or
	// negative included (every call then fails at once): cluster-autoscaler-1.36.1
	// externalgrpc_cloud_provider.go:413-418 falls back to 5 s only when the key is absent.
	DeadlineSet bool
}

// v2File is the file's shape for DialectYAMLv2.
type v2File struct {
	Address string `yaml:"address"`
	Cert    string `yaml:"cert"`
	Key     string `yaml:"key"`
	Cacert  string `yaml:"cacert"`
}

// jsonFile is the file's shape for DialectJSONTags.
type jsonFile struct {
	Address     string           `json:"address"`
	Cert        string           `json:"cert,omitempty"`
	Key         string           `json:"key,omitempty"`
	Cacert      string           `json:"cacert,omitempty"`
	GRPCTimeout *metav1.Duration `json:"grpc_timeout,omitempty"`
}

// ParseCloudConfig decodes the file's bytes in the given dialect. Keys a dialect does not know are
// ignored, as both decoders do by default.
func ParseCloudConfig(raw []byte, dialect ConfigDialect) (*CloudConfig, error) {
	if dialect == DialectYAMLv2 {
		var f v2File
		if err := yamlv2.Unmarshal(raw, &f); err != nil {
			return nil, fmt.Errorf("cloud-config is not valid YAML for %s: %w", dialect, err)
		}
		return &CloudConfig{Address: f.Address, ClientCert: f.Cert, ClientKey: f.Key, ServerCA: f.Cacert}, nil
	}
	var f jsonFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("cloud-config is not valid YAML for %s: %w", dialect, err)
	}
	c := &CloudConfig{Address: f.Address, ClientCert: f.Cert, ClientKey: f.Key, ServerCA: f.Cacert}
	if f.GRPCTimeout != nil {
		c.Deadline, c.DeadlineSet = f.GRPCTimeout.Duration, true
	}
	return c, nil
}

// ReadCloudConfig reads and decodes the file at path as the newer clients do.
func ReadCloudConfig(path string) (*CloudConfig, error) {
	return readCloudConfig(path, DialectJSONTags)
}

func readCloudConfig(path string, dialect ConfigDialect) (*CloudConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading cloud-config: %w", err)
	}
	c, err := ParseCloudConfig(raw, dialect)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Timeout is the per-call deadline for a newer client: grpc_timeout, else 5 s.
func (c *CloudConfig) Timeout() time.Duration {
	if c.DeadlineSet || c.Deadline != 0 {
		return c.Deadline
	}
	return fixedTimeout
}

// timeoutFor is the per-call deadline a generation uses with this file.
func (c *CloudConfig) timeoutFor(gen Generation) time.Duration {
	if !gen.ConfigTimeout {
		return fixedTimeout
	}
	return c.Timeout()
}

// Marshal writes the settings back as a cloud-config file (every key a newer client reads).
func (c *CloudConfig) Marshal() ([]byte, error) {
	f := jsonFile{Address: c.Address, Cert: c.ClientCert, Key: c.ClientKey, Cacert: c.ServerCA}
	if c.DeadlineSet || c.Deadline != 0 {
		f.GRPCTimeout = &metav1.Duration{Duration: c.Deadline}
	}
	return yaml.Marshal(&f)
}
