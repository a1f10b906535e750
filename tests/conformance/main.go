// Command conformance drives a live cloudprovider-grpc server the way cluster-autoscaler's externalgrpc
// cloud provider does, with the wire schemas of three CA generations, and reports each check by the
// upstream function it exercises. Run it through run.sh, which builds it, makes the test PKI, starts
// the servers and passes the cloud-config files.
//
//	conformance gencerts -dir DIR -server-name localhost
//	conformance run -cloud-config FILE [-faulty-cloud-config FILE] [-pki DIR] [-golden DIR] [-profile sim|generic]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	apiv1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Runner runs named checks and prints one line per check.
type Runner struct {
	passed, failed int
}

// Check runs fn and reports it as "<name> [<release>]". A panic is a failure, not a crash.
func (r *Runner) Check(name, release string, fn func() error) {
	start := time.Now()
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return fn()
	}()
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		r.failed++
		fmt.Printf("FAIL  %-9s %s (%v)\n      %v\n", "["+release+"]", name, took, err)
		return
	}
	r.passed++
	fmt.Printf("ok    %-9s %s (%v)\n", "["+release+"]", name, took)
}

// Info prints a figure that is reported, not asserted.
func (r *Runner) Info(msg string) { fmt.Printf("      info: %s\n", msg) }

type harnessConfig struct {
	cloudConfig       string
	faultyCloudConfig string
	pki               string
	golden            string
	profile           string
	releases          []string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance gencerts|run|bench [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "gencerts":
		fs := flag.NewFlagSet("gencerts", flag.ExitOnError)
		dir := fs.String("dir", "", "output directory")
		name := fs.String("server-name", "localhost", "the only DNS name in the server certificate")
		_ = fs.Parse(os.Args[2:])
		if err := writeTestPKI(*dir, *name); err != nil {
			fmt.Fprintln(os.Stderr, "gencerts:", err)
			os.Exit(1)
		}
	case "run":
		fs := flag.NewFlagSet("run", flag.ExitOnError)
		cfg := &harnessConfig{}
		fs.StringVar(&cfg.cloudConfig, "cloud-config", "", "CA cloud-config (YAML: address, cert, key, cacert, grpc_timeout)")
		fs.StringVar(&cfg.faultyCloudConfig, "faulty-cloud-config", "", "cloud-config of a server whose first group stocks out and has no price/options")
		fs.StringVar(&cfg.pki, "pki", "", "directory from `gencerts` (for the untrusted-client check)")
		fs.StringVar(&cfg.golden, "golden", "../shared/golden/externalgrpc", "directory of upstream schema dumps")
		fs.StringVar(&cfg.profile, "profile", "sim", "sim: also check the documented demo groups exactly; generic: any backend")
		releases := fs.String("releases", "master,v1.34.2,v1.33.0", "CA proto generations to speak, newest first")
		_ = fs.Parse(os.Args[2:])
		cfg.releases = strings.Split(*releases, ",")
		os.Exit(run(cfg))
	case "bench":
		fs := flag.NewFlagSet("bench", flag.ExitOnError)
		cloudConfig := fs.String("cloud-config", "", "CA cloud-config (YAML: address, ...)")
		golden := fs.String("golden", "../shared/golden/externalgrpc", "directory of upstream schema dumps")
		calls := fs.Int("calls", 3000, "calls per RPC")
		_ = fs.Parse(os.Args[2:])
		os.Exit(benchmark(*cloudConfig, *golden, *calls))
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func run(cfg *harnessConfig) int {
	r := &Runner{}
	s := &Suite{r: r, profile: cfg.profile, cfg: cfg,
		templates: map[string]*apiv1.Node{}, options: map[string]optionsResult{}, prices: map[string]float64{}}
	ok := true
	for i, rel := range cfg.releases {
		rel := rel
		r.Check("CloudProvider.BuildExternalGrpc (cloud-config "+filepath.Base(cfg.cloudConfig)+")", rel, func() error {
			schema, err := LoadSchema(cfg.golden, rel)
			if err != nil {
				return err
			}
			p, err := BuildExternalGrpc(cfg.cloudConfig, schema)
			if err != nil {
				return err
			}
			if i == 0 {
				s.master = p
			} else {
				s.legacy = append(s.legacy, p)
			}
			return nil
		})
	}
	if s.master == nil {
		ok = false
	}
	if cfg.faultyCloudConfig != "" && s.master != nil {
		r.Check("CloudProvider.BuildExternalGrpc (cloud-config "+filepath.Base(cfg.faultyCloudConfig)+")", cfg.releases[0], func() error {
			p, err := BuildExternalGrpc(cfg.faultyCloudConfig, s.master.schema)
			s.faulty = p
			return err
		})
	}
	if !ok {
		fmt.Printf("conformance: %d passed, %d failed\n", r.passed, r.failed)
		return 1
	}
	s.mtls()

	s.nodeGroups(s.master)
	s.seed()
	s.gpu()
	s.templateNodeInfo(s.master)
	s.getOptions(s.master)
	s.pricing(s.master)
	for _, p := range s.legacy {
		s.nodeGroups(p)
		s.templateNodeInfo(p)
		s.getOptions(p)
		s.pricing(p)
	}
	s.nodeGroupForNode()
	s.errorMapping()
	s.scaling()
	s.errorInfo()
	s.refreshAndCleanup()

	fmt.Printf("conformance: %d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		return 1
	}
	return 0
}

// variantConfig writes a copy of the cloud-config with some keys changed and returns its path.
func variantConfig(base string, change func(*cloudConfig)) (string, error) {
	raw, err := os.ReadFile(base)
	if err != nil {
		return "", err
	}
	var c cloudConfig
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return "", err
	}
	change(&c)
	out, err := yaml.Marshal(&c)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "cloud-config-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.Write(out)
	return f.Name(), err
}

// refused builds a client and expects its first RPC to fail at the transport (UNAVAILABLE).
func refused(p *Provider, err error) error {
	if err != nil {
		return err
	}
	defer p.Close()
	rerr := p.Refresh()
	if rerr == nil {
		return errors.New("the server answered")
	}
	if st, _ := status.FromError(rerr); st.Code() != codes.Unavailable {
		return fmt.Errorf("refused with %s, want UNAVAILABLE (a transport refusal): %v", st.Code(), rerr)
	}
	return nil
}

func (s *Suite) mtls() {
	base := s.cfg.cloudConfig
	raw, _ := os.ReadFile(base)
	var c cloudConfig
	_ = yaml.Unmarshal(raw, &c)
	if c.Cert == "" {
		s.r.Info("cloud-config has no cert: mTLS checks skipped")
		return
	}
	host, port, _ := net.SplitHostPort(c.Address)
	s.r.Check("CloudProvider.BuildExternalGrpc (mTLS handshake, ServerName = host of address)", "master", func() error {
		return s.master.Refresh()
	})
	if host == "localhost" {
		s.r.Check("CloudProvider.BuildExternalGrpc (address host not in the server certificate is refused)", "master", func() error {
			path, err := variantConfig(base, func(c *cloudConfig) { c.Address = net.JoinHostPort("127.0.0.1", port) })
			if err != nil {
				return err
			}
			defer os.Remove(path)
			return refused(BuildExternalGrpc(path, s.master.schema))
		})
	}
	s.r.Check("CloudProvider.BuildExternalGrpc (no cert in cloud-config = insecure client, refused)", "master", func() error {
		path, err := variantConfig(base, func(c *cloudConfig) { c.Cert, c.Key, c.Cacert = "", "", "" })
		if err != nil {
			return err
		}
		defer os.Remove(path)
		return refused(BuildExternalGrpc(path, s.master.schema))
	})
	s.r.Check("CloudProvider.Refresh (TLS client without a client certificate is refused)", "master", func() error {
		pem, err := os.ReadFile(c.Cacert)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		return refused(dialTLS(s.master.schema, c.Address, &tls.Config{ServerName: host, RootCAs: pool}))
	})
	if s.cfg.pki != "" {
		s.r.Check("CloudProvider.BuildExternalGrpc (client certificate from an untrusted CA is refused)", "master", func() error {
			path, err := variantConfig(base, func(c *cloudConfig) {
				c.Cert, c.Key = filepath.Join(s.cfg.pki, "rogue-client.crt"), filepath.Join(s.cfg.pki, "rogue-client.key")
			})
			if err != nil {
				return err
			}
			defer os.Remove(path)
			return refused(BuildExternalGrpc(path, s.master.schema))
		})
	}
}

func dialTLS(schema *Schema, address string, tc *tls.Config) (*Provider, error) {
	conn, err := grpc.Dial(address, grpc.WithTransportCredentials(credentials.NewTLS(tc))) //nolint:staticcheck // as upstream
	if err != nil {
		return nil, err
	}
	return &Provider{schema: schema, conn: conn, grpcTimeout: defaultGRPCTimeout, calls: &callLog{counts: map[string]int{}},
		nodeGroupForNodeCache: map[string]*NodeGroup{}}, nil
}
