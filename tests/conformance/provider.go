package main

// The checks drive cluster-autoscaler's own externalgrpc cloud provider
// (k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc, built from the snapshot under
// ../shared/upstream at the generation chosen by a build tag, see ca_*.go). Provider and NodeGroup
// below are thin views on CA's objects that only add what a check needs to observe:
//   - how many RPCs went over the wire: read from the server's own request counters (/metrics),
//     because CA's client hides its connection; this is what proves CA's client-side caching;
//   - the slowest call, timed around each CA method, against the cloud-config's grpc_timeout;
//   - a stable view object per CA object, so "the same cached object came back" stays checkable.
// Every RPC is issued by CA's code. The only requests CA's provider cannot express are the ones a
// check makes with CA's generated stub directly (protos.CloudProviderClient): a node group id CA
// never listed (NOT_FOUND mapping) and a TLS client without a client certificate (CA's cloud-config
// has no such mode).

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	apiv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc/protos"
	"sigs.k8s.io/yaml"
)

// defaultGRPCTimeout is CA's defaultGRPCTimeout (externalgrpc_cloud_provider.go).
const defaultGRPCTimeout = 5 * time.Second

// cloudConfig has the keys of CA's externalgrpc cloud-config, for writing variants of it.
type cloudConfig struct {
	Address     string           `json:"address"`
	Key         string           `json:"key"`
	Cert        string           `json:"cert"`
	Cacert      string           `json:"cacert"`
	GRPCTimeout *metav1.Duration `json:"grpc_timeout,omitempty"`
}

// serverCalls reads the server's per-method RPC counters from its Prometheus endpoint.
type serverCalls struct {
	url string
}

// count is the number of RPCs of `method` the server has handled, whatever their status.
func (c *serverCalls) count(method string) int {
	if c == nil || c.url == "" {
		panic("no -metrics URL given: RPC counts cannot be observed")
	}
	resp, err := http.Get(c.url)
	if err != nil {
		panic(fmt.Sprintf("metrics: %v", err))
	}
	defer resp.Body.Close()
	total := 0.0
	want := `method="` + method + `"`
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cloudprovider_grpc_rpc_requests_total{") || !strings.Contains(line, want) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			panic(fmt.Sprintf("metrics line %q: %v", line, err))
		}
		total += v
	}
	return int(total)
}

// Provider is a view on one CA externalgrpc CloudProvider.
type Provider struct {
	ca          caCloudProvider
	release     string
	configPath  string // the cloud-config CA was built from
	grpcTimeout time.Duration
	calls       *serverCalls

	mu      sync.Mutex
	views   map[caNodeGroup]*NodeGroup
	slowest time.Duration
	slowRPC string
}

// BuildExternalGrpc builds CA's provider from a cloud-config file exactly as CA's main does.
func BuildExternalGrpc(cloudConfigPath, metricsURL string) (*Provider, error) {
	raw, err := os.ReadFile(cloudConfigPath)
	if err != nil {
		return nil, err
	}
	var c cloudConfig
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	timeout := defaultGRPCTimeout
	if c.GRPCTimeout != nil {
		timeout = c.GRPCTimeout.Duration
	}
	return &Provider{
		ca: caBuildExternalGrpc(cloudConfigPath), release: caRelease, configPath: cloudConfigPath, grpcTimeout: timeout,
		calls: &serverCalls{url: metricsURL}, views: map[caNodeGroup]*NodeGroup{},
	}, nil
}

func (p *Provider) timed(method string, fn func()) {
	start := time.Now()
	fn()
	if d := time.Since(start); d > p.slowest {
		p.slowest, p.slowRPC = d, method
	}
}

func (p *Provider) view(g caNodeGroup) *NodeGroup {
	if g == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if v, ok := p.views[g]; ok {
		return v
	}
	v := &NodeGroup{ca: g, provider: p}
	p.views[g] = v
	return v
}

func (p *Provider) NodeGroups() []*NodeGroup {
	var groups []caNodeGroup
	p.timed("NodeGroups", func() { groups = p.ca.NodeGroups() })
	out := make([]*NodeGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, p.view(g))
	}
	return out
}

func (p *Provider) NodeGroupForNode(node *apiv1.Node) (*NodeGroup, error) {
	var g caNodeGroup
	var err error
	p.timed("NodeGroupForNode", func() { g, err = p.ca.NodeGroupForNode(node) })
	if err != nil || g == nil {
		return nil, err
	}
	return p.view(g), nil
}

func (p *Provider) GPULabel() (label string) {
	p.timed("GPULabel", func() { label = p.ca.GPULabel() })
	return label
}

func (p *Provider) GetAvailableGPUTypes() (types map[string]struct{}) {
	p.timed("GetAvailableGPUTypes", func() { types = p.ca.GetAvailableGPUTypes() })
	return types
}

func (p *Provider) Refresh() (err error) {
	p.timed("Refresh", func() { err = p.ca.Refresh() })
	return err
}

func (p *Provider) Cleanup() (err error) {
	p.timed("Cleanup", func() { err = p.ca.Cleanup() })
	return err
}

func (p *Provider) NodePrice(node *apiv1.Node, start, end time.Time) (price float64, err error) {
	pricing, aerr := p.ca.Pricing()
	if aerr != nil {
		return 0, aerr
	}
	p.timed("PricingNodePrice", func() { price, err = pricing.NodePrice(node, start, end) })
	return price, err
}

func (p *Provider) PodPrice(pod *apiv1.Pod, start, end time.Time) (price float64, err error) {
	pricing, aerr := p.ca.Pricing()
	if aerr != nil {
		return 0, aerr
	}
	p.timed("PricingPodPrice", func() { price, err = pricing.PodPrice(pod, start, end) })
	return price, err
}

// NodeGroup is a view on one of CA's externalgrpc NodeGroup objects.
type NodeGroup struct {
	ca       caNodeGroup
	provider *Provider
}

func (n *NodeGroup) Id() string   { return n.ca.Id() }
func (n *NodeGroup) MinSize() int { return n.ca.MinSize() }
func (n *NodeGroup) MaxSize() int { return n.ca.MaxSize() }

func (n *NodeGroup) TargetSize() (size int, err error) {
	n.provider.timed("NodeGroupTargetSize", func() { size, err = n.ca.TargetSize() })
	return size, err
}

func (n *NodeGroup) IncreaseSize(delta int) (err error) {
	n.provider.timed("NodeGroupIncreaseSize", func() { err = n.ca.IncreaseSize(delta) })
	return err
}

func (n *NodeGroup) DecreaseTargetSize(delta int) (err error) {
	n.provider.timed("NodeGroupDecreaseTargetSize", func() { err = n.ca.DecreaseTargetSize(delta) })
	return err
}

func (n *NodeGroup) DeleteNodes(nodes []*apiv1.Node) (err error) {
	n.provider.timed("NodeGroupDeleteNodes", func() { err = n.ca.DeleteNodes(nodes) })
	return err
}

func (n *NodeGroup) Nodes() (instances []Instance, err error) {
	n.provider.timed("NodeGroupNodes", func() { instances, err = n.ca.Nodes() })
	return instances, err
}

// TemplateNodeInfo returns the Node inside CA's own framework.NodeInfo (nil when the server sent no
// template, which CA caches as "no template").
func (n *NodeGroup) TemplateNodeInfo() (node *apiv1.Node, err error) {
	n.provider.timed("NodeGroupTemplateNodeInfo", func() {
		info, ierr := n.ca.TemplateNodeInfo()
		err = ierr
		if ierr == nil && info != nil {
			node = info.Node()
		}
	})
	return node, err
}

func (n *NodeGroup) GetOptions(defaults NodeGroupAutoscalingOptions) (opts *NodeGroupAutoscalingOptions, err error) {
	n.provider.timed("NodeGroupGetOptions", func() { opts, err = n.ca.GetOptions(defaults) })
	return opts, err
}

// dialLikeCA opens a connection with the transport CA derives from a cloud-config (mutual TLS with
// ServerName = the address's host when `cert` is set, plaintext otherwise), or with `override`.
func dialLikeCA(cloudConfigPath string, override *tls.Config) (*grpc.ClientConn, error) {
	raw, err := os.ReadFile(cloudConfigPath)
	if err != nil {
		return nil, err
	}
	var c cloudConfig
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	switch {
	case override != nil:
		creds = credentials.NewTLS(override)
	case c.Cert != "":
		host, _, err := net.SplitHostPort(c.Address)
		if err != nil {
			return nil, err
		}
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, err
		}
		pem, err := os.ReadFile(c.Cacert)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		creds = credentials.NewTLS(&tls.Config{ServerName: host, Certificates: []tls.Certificate{cert}, RootCAs: pool})
	}
	return grpc.NewClient("passthrough:///"+c.Address, grpc.WithTransportCredentials(creds))
}

// stub is CA's generated client on a connection from dialLikeCA, for the two requests CA's provider
// cannot make (see the file comment).
func stub(cloudConfigPath string, override *tls.Config) (protos.CloudProviderClient, func(), error) {
	conn, err := dialLikeCA(cloudConfigPath, override)
	if err != nil {
		return nil, nil, err
	}
	return protos.NewCloudProviderClient(conn), func() { _ = conn.Close() }, nil
}

func withTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), defaultGRPCTimeout)
}
