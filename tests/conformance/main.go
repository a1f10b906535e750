// Command conformance drives a live cloudprovider-grpc server through the project's CA-faithful
// client (package caclient), at one of CA's client wire generations, and reports each check by the
// CA function it exercises. Run it through run.sh, which starts the servers, makes the test PKI and
// passes the cloud-config files; tests/support/conformance.py builds it (the gRPC code generated from
// the project's proto/, Kubernetes' types from k8s.io/api).
//
//	conformance generations
//	conformance gencerts -dir DIR -server-name localhost
//	conformance run -generation G -cloud-config FILE -metrics URL [-faulty-cloud-config FILE -faulty-metrics URL] [-pki DIR] [-profile sim|generic] [-only a,b] [-future]
//	conformance getters -generation G
//	conformance bench -cloud-config FILE [-calls N]
//	conformance loop -cloud-config FILE -loops N [-options-per-node 4]
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
	"time"

	"strings"

	"cloudprovider-grpc/tests/conformance/caclient"
	"cloudprovider-grpc/tests/conformance/pb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
		fmt.Printf("FAIL  %-13s %s (%v)\n      %v\n", "["+release+"]", name, took, err)
		return
	}
	r.passed++
	fmt.Printf("ok    %-13s %s (%v)\n", "["+release+"]", name, took)
}

// Info prints a figure that is reported, not asserted.
func (r *Runner) Info(msg string) { fmt.Printf("      info: %s\n", msg) }

type harnessConfig struct {
	generation        string
	cloudConfig       string
	metrics           string
	faultyCloudConfig string
	faultyMetrics     string
	pki               string
	profile           string
	only              string
	future            bool
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
	case "generations":
		for _, g := range caclient.Generations {
			fmt.Printf("%s\t%s\n", g.Name, g.Schema)
		}
	case "run":
		fs := flag.NewFlagSet("run", flag.ExitOnError)
		cfg := &harnessConfig{}
		fs.StringVar(&cfg.generation, "generation", caclient.Newest().Name, "CA client generation: "+strings.Join(generationNames(), ", ")+" (or its schema release)")
		fs.StringVar(&cfg.cloudConfig, "cloud-config", "", "CA cloud-config (YAML: address, cert, key, cacert, grpc_timeout)")
		fs.StringVar(&cfg.metrics, "metrics", "", "the server's /metrics URL (its RPC counters prove CA's client-side caching)")
		fs.StringVar(&cfg.faultyCloudConfig, "faulty-cloud-config", "", "cloud-config of a server whose first group stocks out and has no price/options")
		fs.StringVar(&cfg.faultyMetrics, "faulty-metrics", "", "the faulty server's /metrics URL")
		fs.StringVar(&cfg.pki, "pki", "", "directory from `gencerts` (for the untrusted-client check)")
		fs.StringVar(&cfg.profile, "profile", "sim", "sim: also check the documented demo groups exactly; generic: any backend")
		fs.StringVar(&cfg.only, "only", "", "comma-separated check families to run (default all): "+strings.Join(familyNames(), ","))
		fs.BoolVar(&cfg.future, "future", false, "a CA newer than the server's proto: every request carries fields the server does not know")
		_ = fs.Parse(os.Args[2:])
		os.Exit(run(cfg))
	case "getters":
		fs := flag.NewFlagSet("getters", flag.ExitOnError)
		generation := fs.String("generation", caclient.Newest().Name, "CA client generation")
		_ = fs.Parse(os.Args[2:])
		os.Exit(gettersMain(*generation))
	case "loop":
		os.Exit(loopMain(os.Args[2:]))
	case "bench":
		fs := flag.NewFlagSet("bench", flag.ExitOnError)
		cloudConfig := fs.String("cloud-config", "", "CA cloud-config (YAML: address, ...)")
		calls := fs.Int("calls", 3000, "calls per RPC")
		_ = fs.Parse(os.Args[2:])
		os.Exit(benchmark(*cloudConfig, *calls))
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// families are the check groups in the order they run; later ones rely on what earlier ones learnt
// (the group list) and on the state earlier ones left (scaling after the read-only checks).
var families = []struct {
	name string
	run  func(*Suite)
}{
	{"mtls", (*Suite).mtls},
	{"groups", func(s *Suite) { s.nodeGroups(s.ca); s.seed() }},
	{"gpu", (*Suite).gpu},
	{"templates", func(s *Suite) { s.templateNodeInfo(s.ca); s.dualTemplateFields() }},
	{"config", (*Suite).cloudConfigReading},
	{"options", func(s *Suite) { s.getOptions(s.ca) }},
	{"pricing", func(s *Suite) { s.pricing(s.ca) }},
	{"fornode", (*Suite).nodeGroupForNode},
	{"errors", (*Suite).errorMapping},
	{"scaling", (*Suite).scaling},
	{"errorinfo", (*Suite).errorInfo},
	{"future", (*Suite).unknownFields},
	{"refresh", (*Suite).refreshAndCleanup},
}

func generationNames() []string {
	out := make([]string, 0, len(caclient.Generations))
	for _, g := range caclient.Generations {
		out = append(out, g.Name)
	}
	return out
}

func familyNames() []string {
	out := make([]string, 0, len(families))
	for _, f := range families {
		out = append(out, f.name)
	}
	return out
}

func run(cfg *harnessConfig) int {
	gen, err := caclient.GenerationByName(cfg.generation)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	only := map[string]bool{}
	for _, name := range strings.Split(cfg.only, ",") {
		if name = strings.TrimSpace(name); name != "" {
			only[name] = true
		}
	}
	for name := range only {
		if !contains(familyNames(), name) {
			fmt.Fprintf(os.Stderr, "unknown check family %q (have %s)\n", name, strings.Join(familyNames(), ","))
			return 2
		}
	}
	r := &Runner{}
	s := &Suite{r: r, gen: gen, profile: cfg.profile, cfg: cfg}
	fmt.Printf("client generation %s (wire schema %s)\n", gen.Name, gen.Schema)
	for _, f := range gen.Added {
		fmt.Printf("  also declared: %s.%s = %d (%s), from the release notes and review thread; the tag's source was not readable\n", f.Message, f.Name, f.Number, f.TypeName)
	}
	fmt.Printf("  UNIMPLEMENTED from optional RPCs: %s; deadline: %s; cloud-config read with %s\n",
		map[bool]string{true: "ErrNotImplemented", false: "passed up raw"}[gen.MapsUnimplemented],
		map[bool]string{true: "grpc_timeout (default 5s)", false: "fixed 5s"}[gen.ConfigTimeout], gen.ConfigDialect)
	if cfg.future {
		fmt.Println("  future mode: every request carries fields no release declares")
	}
	r.Check("CloudProvider.BuildExternalGrpc (cloud-config "+filepath.Base(cfg.cloudConfig)+")", s.tag(), func() error {
		p, err := BuildExternalGrpc(cfg.cloudConfig, cfg.metrics, gen)
		if p != nil {
			p.ca.SendFutureFields(cfg.future)
		}
		s.ca = p
		return err
	})
	if s.ca == nil {
		fmt.Printf("conformance: %d passed, %d failed\n", r.passed, r.failed)
		return 1
	}
	if cfg.faultyCloudConfig != "" {
		r.Check("CloudProvider.BuildExternalGrpc (cloud-config "+filepath.Base(cfg.faultyCloudConfig)+")", s.tag(), func() error {
			p, err := BuildExternalGrpc(cfg.faultyCloudConfig, cfg.faultyMetrics, gen)
			if p != nil {
				p.ca.SendFutureFields(cfg.future)
			}
			s.faulty = p
			return err
		})
	}
	// Every family needs the group list; a subset run lists the groups without the listing's checks.
	if len(only) > 0 && !only["groups"] {
		s.groups = map[string]*NodeGroup{}
		for _, g := range s.ca.NodeGroups() {
			s.groups[g.Id()] = g
		}
	}
	for _, f := range families {
		if len(only) == 0 || only[f.name] {
			f.run(s)
		}
	}

	fmt.Printf("conformance: %d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		return 1
	}
	return 0
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// variantConfig writes a copy of the cloud-config with some keys changed and returns its path.
func variantConfig(base string, change func(*cloudConfig)) (string, error) {
	c, err := caclient.ReadCloudConfig(base)
	if err != nil {
		return "", err
	}
	change(c)
	out, err := c.Marshal()
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

// refused builds CA's client and expects its first RPC to fail at the transport (UNAVAILABLE).
func refused(p *Provider, err error) error {
	if err != nil {
		return err
	}
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
	c, err := caclient.ReadCloudConfig(base)
	if err != nil {
		s.r.Check("CloudProvider.BuildExternalGrpc (cloud-config readable)", s.tag(), func() error { return err })
		return
	}
	if c.ClientCert == "" {
		s.r.Info("cloud-config has no cert: mTLS checks skipped")
		return
	}
	host, port, _ := net.SplitHostPort(c.Address)
	s.r.Check("CloudProvider.BuildExternalGrpc (mTLS handshake, ServerName = host of address)", s.tag(), func() error {
		return s.ca.Refresh()
	})
	if host == "localhost" {
		s.r.Check("CloudProvider.BuildExternalGrpc (address host not in the server certificate is refused)", s.tag(), func() error {
			path, err := variantConfig(base, func(c *cloudConfig) { c.Address = net.JoinHostPort("127.0.0.1", port) })
			if err != nil {
				return err
			}
			defer os.Remove(path)
			return refused(BuildExternalGrpc(path, "", s.gen))
		})
	}
	s.r.Check("CloudProvider.BuildExternalGrpc (no cert in cloud-config = insecure client, refused)", s.tag(), func() error {
		path, err := variantConfig(base, func(c *cloudConfig) { c.ClientCert, c.ClientKey, c.ServerCA = "", "", "" })
		if err != nil {
			return err
		}
		defer os.Remove(path)
		return refused(BuildExternalGrpc(path, "", s.gen))
	})
	s.r.Check("CloudProvider.Refresh (TLS client without a client certificate is refused)", s.tag(), func() error {
		pem, err := os.ReadFile(c.ServerCA)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		client, closeConn, err := stub(base, &tls.Config{ServerName: host, RootCAs: pool})
		if err != nil {
			return err
		}
		defer closeConn()
		ctx, cancel := withTimeout()
		defer cancel()
		_, rerr := client.Refresh(ctx, &pb.RefreshRequest{})
		if st, _ := status.FromError(rerr); rerr == nil || st.Code() != codes.Unavailable {
			return fmt.Errorf("answered %v, want UNAVAILABLE (a transport refusal)", rerr)
		}
		return nil
	})
	if s.cfg.pki != "" {
		s.r.Check("CloudProvider.BuildExternalGrpc (client certificate from an untrusted CA is refused)", s.tag(), func() error {
			path, err := variantConfig(base, func(c *cloudConfig) {
				c.ClientCert, c.ClientKey = filepath.Join(s.cfg.pki, "rogue-client.crt"), filepath.Join(s.cfg.pki, "rogue-client.key")
			})
			if err != nil {
				return err
			}
			defer os.Remove(path)
			return refused(BuildExternalGrpc(path, "", s.gen))
		})
	}
}
