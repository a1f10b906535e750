package main

// The checks drive the project's own CA-faithful client (package caclient: CA's externalgrpc client
// behaviour at one wire generation). Provider and NodeGroup below are thin views on the client's
// objects that only add what a check needs to observe:
//   - how many RPCs went over the wire: read from the server's own request counters (/metrics),
//     which is what proves the client-side caching the server is written against;
//   - the slowest call, timed around each client method, against the cloud-config's grpc_timeout;
//   - a stable view object per client object, so "the same cached object came back" stays checkable.
// The only requests CA's client cannot express are made with the stub generated from the project's
// proto (pb.CloudProviderClient): a node group id CA never listed (NOT_FOUND mapping) and a TLS
// client without a client certificate (CA's cloud-config has no such mode).

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	"cloudprovider-grpc/tests/conformance/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	apiv1 "k8s.io/api/core/v1"
)

type (
	Instance                    = caclient.Instance
	NodeGroupAutoscalingOptions = caclient.Options
)

const (
	InstanceRunning          = caclient.InstanceRunning
	InstanceCreating         = caclient.InstanceCreating
	InstanceDeleting         = caclient.InstanceDeleting
	OutOfResourcesErrorClass = caclient.OutOfResourcesErrorClass
)

var ErrNotImplemented = caclient.ErrNotImplemented

// defaultGRPCTimeout is the deadline of the stub's own calls.
const defaultGRPCTimeout = caclient.DefaultGRPCTimeout

type cloudConfig = caclient.CloudConfig

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

// Provider is a view on one client (one CA process).
type Provider struct {
	ca          *caclient.CloudProvider
	release     string
	configPath  string // the cloud-config the client was built from
	grpcTimeout time.Duration
	calls       *serverCalls

	mu      sync.Mutex
	views   map[*caclient.NodeGroup]*NodeGroup
	slowest time.Duration
	slowRPC string
}

// BuildExternalGrpc builds a client of generation gen from a cloud-config file, as CA does at start.
func BuildExternalGrpc(cloudConfigPath, metricsURL string, gen caclient.Generation) (*Provider, error) {
	ca, err := caclient.Build(cloudConfigPath, gen)
	if err != nil {
		return nil, err
	}
	return &Provider{
		ca: ca, release: gen.Name, configPath: cloudConfigPath, grpcTimeout: ca.Timeout(),
		calls: &serverCalls{url: metricsURL}, views: map[*caclient.NodeGroup]*NodeGroup{},
	}, nil
}

func (p *Provider) timed(method string, fn func()) {
	start := time.Now()
	fn()
	if d := time.Since(start); d > p.slowest {
		p.slowest, p.slowRPC = d, method
	}
}

func (p *Provider) view(g *caclient.NodeGroup) *NodeGroup {
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
	var groups []*caclient.NodeGroup
	p.timed("NodeGroups", func() { groups = p.ca.NodeGroups() })
	out := make([]*NodeGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, p.view(g))
	}
	return out
}

func (p *Provider) NodeGroupForNode(node *apiv1.Node) (*NodeGroup, error) {
	var g *caclient.NodeGroup
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
	p.timed("PricingNodePrice", func() { price, err = p.ca.NodePrice(node, start, end) })
	return price, err
}

func (p *Provider) PodPrice(pod *apiv1.Pod, start, end time.Time) (price float64, err error) {
	p.timed("PricingPodPrice", func() { price, err = p.ca.PodPrice(pod, start, end) })
	return price, err
}

// NodeGroup is a view on one of the client's NodeGroup objects.
type NodeGroup struct {
	ca       *caclient.NodeGroup
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

// TemplateNodeInfo returns the template Node (nil when the server sent no template, which the client
// caches as "no template").
func (n *NodeGroup) TemplateNodeInfo() (node *apiv1.Node, err error) {
	n.provider.timed("NodeGroupTemplateNodeInfo", func() { node, err = n.ca.TemplateNodeInfo() })
	return node, err
}

func (n *NodeGroup) GetOptions(defaults NodeGroupAutoscalingOptions) (opts *NodeGroupAutoscalingOptions, err error) {
	n.provider.timed("NodeGroupGetOptions", func() { opts, err = n.ca.GetOptions(defaults) })
	return opts, err
}

// dialLikeCA opens a connection with the transport CA derives from a cloud-config, or with `override`.
func dialLikeCA(cloudConfigPath string, override *tls.Config) (*grpc.ClientConn, error) {
	c, err := caclient.ReadCloudConfig(cloudConfigPath)
	if err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	if override != nil {
		creds = credentials.NewTLS(override)
	}
	return c.Dial(creds)
}

// stub is the client generated from the project's proto on a connection from dialLikeCA, for the two
// requests CA's client cannot make (see the file comment).
func stub(cloudConfigPath string, override *tls.Config) (pb.CloudProviderClient, func(), error) {
	conn, err := dialLikeCA(cloudConfigPath, override)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewCloudProviderClient(conn), func() { _ = conn.Close() }, nil
}

func withTimeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), defaultGRPCTimeout)
}
