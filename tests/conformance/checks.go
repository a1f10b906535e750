package main

// The conformance checks. Each is named after the CA function it exercises (CloudProvider.X /
// NodeGroup.X / PricingModel.X of cluster-autoscaler's cloud-provider interface, as the client in
// package caclient implements them), followed by what it proves, and tagged with the client
// generation it ran under. The "sim" profile adds exact expectations for the documented demo
// groups of `cloudprovider-grpc serve` (README "Setup"): general 4 cpu/16Gi min 1 max 10 with one
// machine at $0.20/h, highmem 8 cpu/64Gi 0..5 at $0.50/h, gpu 8 cpu/32Gi + 1 nvidia.com/gpu 0..3
// tainted nvidia.com/gpu=present:NoSchedule at $2.50/h with option overrides.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	"cloudprovider-grpc/tests/conformance/pb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// caDefaults are CA's flag defaults for the per-group options (config/flags.go: 0.5, 0.5, 10m,
// 20m, 15m), which the client sends as `defaults` in NodeGroupGetOptions.
var caDefaults = NodeGroupAutoscalingOptions{
	ScaleDownUtilizationThreshold:    0.5,
	ScaleDownGpuUtilizationThreshold: 0.5,
	ScaleDownUnneededTime:            10 * time.Minute,
	ScaleDownUnreadyTime:             20 * time.Minute,
	MaxNodeProvisionTime:             15 * time.Minute,
}

// Suite holds the clients and what earlier checks learnt, for later ones to compare against.
type Suite struct {
	r       *Runner
	gen     caclient.Generation
	ca      *Provider // the client, of the generation under test
	faulty  *Provider // server whose sim group always stocks out (optional)
	profile string
	cfg     *harnessConfig

	groups map[string]*NodeGroup
}

func (s *Suite) sim() bool { return s.profile == "sim" }

// tag names the client generation in every check line.
func (s *Suite) tag() string { return s.gen.Name }

// readsMaxNodeProvision: the generation's schema has a max-node-provision field in the options
// (CA 1.25-1.28 have none and use 0 whatever the server answers: kubernetes/autoscaler#5935).
func (s *Suite) readsMaxNodeProvision() bool {
	const opts = "NodeGroupAutoscalingOptions"
	return s.ca.ca.Declares(opts, "MaxNodeProvisionTime") || s.ca.ca.Declares(opts, "MaxNodeProvisionDuration")
}

func expectCode(err error, want codes.Code, mentions ...string) error {
	if err == nil {
		return fmt.Errorf("expected %s, got success", want)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("expected a gRPC status %s, got %v", want, err)
	}
	if st.Code() != want {
		return fmt.Errorf("expected %s, got %s: %s", want, st.Code(), st.Message())
	}
	for _, m := range mentions {
		if !strings.Contains(st.Message(), m) {
			return fmt.Errorf("%s message %q does not mention %q", want, st.Message(), m)
		}
	}
	return nil
}

func testNode(name, providerID string, labels map[string]string) *apiv1.Node {
	return &apiv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"conformance": "yes"}},
		Spec:       apiv1.NodeSpec{ProviderID: providerID},
	}
}

// testPod is a realistic pending pod: two containers, an init container and pod overhead, as the
// informer would hand it to CA.
func testPod(cpu, mem string) *apiv1.Pod {
	return &apiv1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", UID: "0f3c7c2e-conformance", Labels: map[string]string{"app": "web"}},
		Spec: apiv1.PodSpec{
			InitContainers: []apiv1.Container{{Name: "init", Image: "busybox", Resources: apiv1.ResourceRequirements{
				Requests: apiv1.ResourceList{apiv1.ResourceCPU: resource.MustParse("100m")},
			}}},
			Containers: []apiv1.Container{
				{Name: "app", Image: "nginx", Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
					apiv1.ResourceCPU: resource.MustParse(cpu), apiv1.ResourceMemory: resource.MustParse(mem),
				}}},
				{Name: "sidecar", Image: "envoy", Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
					apiv1.ResourceCPU: resource.MustParse("100m"), apiv1.ResourceMemory: resource.MustParse("64Mi"),
				}}},
			},
			Tolerations: []apiv1.Toleration{{Key: "nvidia.com/gpu", Operator: apiv1.TolerationOpExists, Effect: apiv1.TaintEffectNoSchedule}},
		},
		Status: apiv1.PodStatus{Phase: apiv1.PodPending},
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// ---------------------------------------------------------------- read-only checks

func (s *Suite) nodeGroups(p *Provider) {
	tag := p.release
	s.r.Check("CloudProvider.NodeGroups", tag, func() error {
		before := p.calls.count("NodeGroups")
		groups := p.NodeGroups()
		if len(groups) == 0 {
			return errors.New("no node groups (an RPC error also shows as an empty list in CA)")
		}
		if p.calls.count("NodeGroups") != before+1 {
			return errors.New("NodeGroups made no RPC on an empty cache")
		}
		byID := map[string]*NodeGroup{}
		for _, g := range groups {
			if g.Id() == "" {
				return errors.New("a node group has an empty id")
			}
			if _, dup := byID[g.Id()]; dup {
				return fmt.Errorf("node group id %q is listed twice", g.Id())
			}
			if g.MinSize() < 0 || g.MaxSize() < g.MinSize() {
				return fmt.Errorf("group %s has min %d max %d", g.Id(), g.MinSize(), g.MaxSize())
			}
			byID[g.Id()] = g
		}
		if s.sim() {
			want := map[string][2]int{"general": {1, 10}, "highmem": {0, 5}, "gpu": {0, 3}}
			for id, mm := range want {
				g := byID[id]
				if g == nil {
					return fmt.Errorf("demo group %q missing (have %v)", id, keys(byID))
				}
				if g.MinSize() != mm[0] || g.MaxSize() != mm[1] {
					return fmt.Errorf("group %s: min/max %d/%d, want %d/%d", id, g.MinSize(), g.MaxSize(), mm[0], mm[1])
				}
			}
		}
		s.groups = byID
		return nil
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedGroups(p *Provider) []*NodeGroup {
	groups := append([]*NodeGroup(nil), p.NodeGroups()...)
	sort.Slice(groups, func(i, j int) bool { return groups[i].Id() < groups[j].Id() })
	return groups
}

// checkTemplate validates a template Node as CA's scale-up simulation consumes it.
func (s *Suite) checkTemplate(p *Provider, g *NodeGroup, node *apiv1.Node) error {
	if node == nil {
		return errors.New("no template (nodeBytes/nodeInfo absent): CA caches 'no template' and cannot scale this group from zero")
	}
	for _, r := range []apiv1.ResourceName{apiv1.ResourceCPU, apiv1.ResourceMemory, apiv1.ResourcePods} {
		c, okc := node.Status.Capacity[r]
		a, oka := node.Status.Allocatable[r]
		if !okc || !oka {
			return fmt.Errorf("%s missing from capacity (%v) or allocatable (%v)", r, okc, oka)
		}
		if a.Sign() <= 0 {
			return fmt.Errorf("allocatable %s is %s: the scheduler would reject every pod", r, a.String())
		}
		if a.Cmp(c) > 0 {
			return fmt.Errorf("allocatable %s %s exceeds capacity %s", r, a.String(), c.String())
		}
	}
	for _, l := range []string{apiv1.LabelOSStable, apiv1.LabelArchStable} {
		if node.Labels[l] == "" {
			return fmt.Errorf("label %s missing: DaemonSets selecting on it would not be simulated", l)
		}
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == apiv1.NodeReady && c.Status == apiv1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("no Ready=True condition (conditions %v)", node.Status.Conditions)
	}
	if !s.sim() {
		return nil
	}
	want := map[string]map[apiv1.ResourceName]string{
		"general": {apiv1.ResourceCPU: "4", apiv1.ResourceMemory: "16Gi"},
		"highmem": {apiv1.ResourceCPU: "8", apiv1.ResourceMemory: "64Gi"},
		"gpu":     {apiv1.ResourceCPU: "8", apiv1.ResourceMemory: "32Gi", "nvidia.com/gpu": "1"},
	}[g.Id()]
	for r, q := range want {
		c := node.Status.Capacity[r]
		if c.Cmp(resource.MustParse(q)) != 0 {
			return fmt.Errorf("capacity %s = %s, want %s", r, c.String(), q)
		}
	}
	if g.Id() == "gpu" {
		a := node.Status.Allocatable["nvidia.com/gpu"]
		if a.Cmp(resource.MustParse("1")) != 0 {
			return fmt.Errorf("allocatable nvidia.com/gpu = %s, want 1", a.String())
		}
		found := false
		for _, t := range node.Spec.Taints {
			if t.Key == "nvidia.com/gpu" && t.Value == "present" && t.Effect == apiv1.TaintEffectNoSchedule {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("taint nvidia.com/gpu=present:NoSchedule missing (taints %v)", node.Spec.Taints)
		}
	} else if len(node.Spec.Taints) != 0 {
		return fmt.Errorf("unexpected taints %v", node.Spec.Taints)
	}
	return nil
}

func (s *Suite) templateNodeInfo(p *Provider) {
	tag := p.release
	for _, g := range sortedGroups(p) {
		g := g
		s.r.Check("NodeGroup.TemplateNodeInfo("+g.Id()+")", tag, func() error {
			before := p.calls.count("NodeGroupTemplateNodeInfo")
			node, err := g.TemplateNodeInfo()
			if p.ca.Declined(err) && !s.sim() {
				return nil // allowed for a backend without templates
			}
			if err != nil {
				return err
			}
			if err := s.checkTemplate(p, g, node); err != nil {
				return err
			}
			again, err := g.TemplateNodeInfo()
			if err != nil || again != node || p.calls.count("NodeGroupTemplateNodeInfo") != before+1 {
				return fmt.Errorf("template not cached on the NodeGroup object (err %v, calls %d)", err, p.calls.count("NodeGroupTemplateNodeInfo")-before)
			}
			if s.sim() && g.Id() == "gpu" {
				label := p.GPULabel()
				if label == "" || node.Labels[label] == "" {
					return fmt.Errorf("gpu template lacks the GPULabel() label %q (labels %v): CA's GetNodeGpuConfig would not see a GPU", label, node.Labels)
				}
				if _, ok := p.GetAvailableGPUTypes()[node.Labels[label]]; !ok {
					return fmt.Errorf("gpu type %q is not in GetAvailableGPUTypes %v", node.Labels[label], p.GetAvailableGPUTypes())
				}
			}
			return nil
		})
	}
}

func (s *Suite) getOptions(p *Provider) {
	tag := p.release
	processor := caclient.ConfigProcessor{Defaults: caDefaults}
	for _, g := range sortedGroups(p) {
		g := g
		var opts *NodeGroupAutoscalingOptions
		s.r.Check("NodeGroup.GetOptions("+g.Id()+")", tag, func() error {
			var err error
			opts, err = g.GetOptions(caDefaults)
			if err != nil {
				// Before 1.29 the client passes every error up raw, and CA's config processor with it.
				return fmt.Errorf("answered %v; a known group must get OK (no options when it has no overrides): an error here fails every per-group option getter of CA", err)
			}
			if opts != nil && !s.readsMaxNodeProvision() {
				return fmt.Errorf("options %+v served to a client that reads no max node provision time and would use 0 (kubernetes/autoscaler#5935); answer no options", *opts)
			}
			if opts != nil {
				for name, v := range map[string]float64{"scaleDownUtilizationThreshold": opts.ScaleDownUtilizationThreshold, "scaleDownGpuUtilizationThreshold": opts.ScaleDownGpuUtilizationThreshold} {
					if v <= 0 || v > 1 {
						return fmt.Errorf("%s = %v, outside (0, 1]", name, v)
					}
				}
				for name, d := range map[string]time.Duration{"scaleDownUnneeded": opts.ScaleDownUnneededTime, "scaleDownUnready": opts.ScaleDownUnreadyTime, "maxNodeProvision": opts.MaxNodeProvisionTime} {
					if d <= 0 {
						return fmt.Errorf("%s = %v: CA would act on a zero duration", name, d)
					}
				}
			}
			if !s.sim() {
				return nil
			}
			if g.Id() == "gpu" && s.readsMaxNodeProvision() {
				// gpu overrides: scale_down_unneeded_time 300 s, utilization threshold 0.3; the rest are CA's defaults sent in the request.
				want := caDefaults
				want.ScaleDownUnneededTime = 5 * time.Minute
				want.ScaleDownUtilizationThreshold = 0.3
				if opts == nil || *opts != want {
					return fmt.Errorf("options %+v, want %+v", opts, want)
				}
			} else if opts != nil {
				return fmt.Errorf("answered options %+v for a group whose overrides this client cannot take; want none (CA then uses its defaults)", *opts)
			}
			return nil
		})
		s.r.Check("NodeGroupConfigProcessor getters("+g.Id()+")", tag, func() error {
			for _, name := range s.gen.ConfigGetters {
				v, err := processor.Get(g.ca, name)
				if err != nil {
					return fmt.Errorf("Get%s failed (%v): CA cannot judge this group's nodes", name, err)
				}
				if opts == nil && v != processor.DefaultOf(name) {
					return fmt.Errorf("Get%s = %v without options from the provider, want CA's default %v", name, v, processor.DefaultOf(name))
				}
			}
			return nil
		})
	}
}

var priceStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (s *Suite) pricing(p *Provider) {
	tag := p.release
	s.r.Check("PricingModel.NodePrice", tag, func() error {
		g := s.groups["general"]
		if g == nil {
			g = s.groupWithNodes()
		}
		if g == nil {
			return errors.New("no group has an instance to price")
		}
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		if len(insts) == 0 {
			return fmt.Errorf("group %s has no instance to price", g.Id())
		}
		node := testNode(g.Id()+"-node", insts[0].Id, map[string]string{"kubernetes.io/os": "linux"})
		hour, err := p.NodePrice(node, priceStart, priceStart.Add(time.Hour))
		if p.ca.Declined(err) && !s.sim() {
			return nil
		}
		if err != nil {
			return err
		}
		two, err := p.NodePrice(node, priceStart, priceStart.Add(2*time.Hour))
		if err != nil {
			return err
		}
		if hour <= 0 || !approx(two, 2*hour) {
			return fmt.Errorf("1h = %v, 2h = %v: want a positive price proportional to the window (start/end times not read?)", hour, two)
		}
		if s.sim() && g.Id() == "general" && !approx(hour, 0.20) {
			return fmt.Errorf("general node for 1h = %v, want 0.20", hour)
		}
		return nil
	})
	s.r.Check("PricingModel.PodPrice", tag, func() error {
		small, big := testPod("1", "2Gi"), testPod("3", "8Gi")
		ps, err := p.PodPrice(small, priceStart, priceStart.Add(time.Hour))
		if p.ca.Declined(err) && !s.sim() {
			return nil
		}
		if err != nil {
			return err
		}
		pb, err := p.PodPrice(big, priceStart, priceStart.Add(time.Hour))
		if err != nil {
			return err
		}
		p2, err := p.PodPrice(small, priceStart, priceStart.Add(2*time.Hour))
		if err != nil {
			return err
		}
		if ps <= 0 || pb <= ps || !approx(p2, 2*ps) {
			return fmt.Errorf("small pod 1h %v, big pod 1h %v, small pod 2h %v: want 0 < small < big and 2h = 2 x 1h (pod or times not read?)", ps, pb, p2)
		}
		return nil
	})
}

// ---------------------------------------------------------------- provider-wide checks

func (s *Suite) gpu() {
	p := s.ca
	s.r.Check("CloudProvider.GPULabel", s.tag(), func() error {
		before := p.calls.count("GPULabel")
		label := p.GPULabel()
		if p.calls.count("GPULabel") != before+1 {
			return errors.New("the first call made no RPC")
		}
		if s.sim() && label == "" {
			return errors.New("empty GPU label: the error path of CA's GPULabel also yields \"\", and is retried every call")
		}
		n := p.calls.count("GPULabel")
		if p.GPULabel() != label || p.calls.count("GPULabel") != n {
			return errors.New("second call was not served from the cache")
		}
		return nil
	})
	s.r.Check("CloudProvider.GetAvailableGPUTypes", s.tag(), func() error {
		types := p.GetAvailableGPUTypes()
		if types == nil {
			return errors.New("RPC failed (CA gets nil and retries every call)")
		}
		if s.sim() && len(types) == 0 {
			return errors.New("no GPU types although the gpu group has one")
		}
		n := p.calls.count("GetAvailableGPUTypes")
		p.GetAvailableGPUTypes()
		if p.calls.count("GetAvailableGPUTypes") != n {
			return errors.New("second call was not served from the cache")
		}
		return nil
	})
}

func (s *Suite) nodeGroupForNode() {
	p := s.ca
	s.r.Check("CloudProvider.NodeGroupForNode(member)", s.tag(), func() error {
		for _, g := range sortedGroups(p) {
			insts, err := g.Nodes()
			if err != nil {
				return err
			}
			if len(insts) == 0 {
				continue
			}
			node := testNode(g.Id()+"-member", insts[0].Id, map[string]string{"kubernetes.io/os": "linux"})
			before := p.calls.count("NodeGroupForNode")
			got, err := p.NodeGroupForNode(node)
			if err != nil {
				return err
			}
			if got == nil || got.Id() != g.Id() || got.MinSize() != g.MinSize() || got.MaxSize() != g.MaxSize() {
				return fmt.Errorf("node %s: got %+v, want group %s (%d..%d)", insts[0].Id, got, g.Id(), g.MinSize(), g.MaxSize())
			}
			again, err := p.NodeGroupForNode(node)
			if err != nil || again != got || p.calls.count("NodeGroupForNode") != before+1 {
				return errors.New("answer not cached until Refresh")
			}
			// An instance that never registered reaches the server as a Node whose name is its providerID.
			unreg, err := p.NodeGroupForNode(testNode(insts[0].Id, insts[0].Id, nil))
			if err != nil || unreg == nil || unreg.Id() != g.Id() {
				return fmt.Errorf("unregistered form of %s: got %v, %v", insts[0].Id, unreg, err)
			}
			return nil
		}
		return errors.New("no group has an instance to look up")
	})
	s.r.Check("CloudProvider.NodeGroupForNode(no group)", s.tag(), func() error {
		node := testNode("foreign-1", "other-cloud://eu-1/i-123", map[string]string{"kubernetes.io/os": "linux"})
		before := p.calls.count("NodeGroupForNode")
		got, err := p.NodeGroupForNode(node)
		if err != nil || got != nil {
			return fmt.Errorf("got %v, %v; want nil, nil (the node is not autoscaled)", got, err)
		}
		if _, err := p.NodeGroupForNode(node); err != nil {
			return err
		}
		if p.calls.count("NodeGroupForNode") != before+2 {
			return errors.New("an empty answer must not be cached by the client")
		}
		return nil
	})
	s.r.Check("CloudProvider.NodeGroupForNode(control plane)", s.tag(), func() error {
		for _, pid := range []string{"", "sim://control-plane/0"} {
			node := testNode("cp-1", pid, map[string]string{"node-role.kubernetes.io/control-plane": "", "kubernetes.io/os": "linux"})
			got, err := p.NodeGroupForNode(node)
			if err != nil || got != nil {
				return fmt.Errorf("providerID %q: got %v, %v; want nil, nil", pid, got, err)
			}
		}
		return nil
	})
}

func (s *Suite) errorMapping() {
	p := s.ca
	// CA's provider only holds groups the server listed; a group that vanished between NodeGroups and
	// the next call is asked for with CA's generated stub.
	ghost := func(call func(pb.CloudProviderClient, context.Context) error) error {
		client, closeConn, err := stub(p.configPath, nil)
		if err != nil {
			return err
		}
		defer closeConn()
		ctx, cancel := withTimeout()
		defer cancel()
		return expectCode(call(client, ctx), codes.NotFound, "no-such-group")
	}
	s.r.Check("NodeGroup.TargetSize(unknown group)", s.tag(), func() error {
		return ghost(func(c pb.CloudProviderClient, ctx context.Context) error {
			_, err := c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: "no-such-group"})
			return err
		})
	})
	s.r.Check("NodeGroup.Nodes(unknown group)", s.tag(), func() error {
		return ghost(func(c pb.CloudProviderClient, ctx context.Context) error {
			_, err := c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "no-such-group"})
			return err
		})
	})
	s.r.Check("NodeGroup.TemplateNodeInfo(unknown group)", s.tag(), func() error {
		return ghost(func(c pb.CloudProviderClient, ctx context.Context) error {
			_, err := c.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: "no-such-group"})
			return err
		})
	})
	s.r.Check("NodeGroup.IncreaseSize(delta <= 0)", s.tag(), func() error {
		g := s.anyGroup()
		for _, d := range []int{0, -1} {
			if err := expectCode(g.IncreaseSize(d), codes.InvalidArgument, "delta"); err != nil {
				return fmt.Errorf("delta %d: %w", d, err)
			}
		}
		return nil
	})
	s.r.Check("NodeGroup.IncreaseSize(above max)", s.tag(), func() error {
		g := s.anyGroup()
		before, err := g.TargetSize()
		if err != nil {
			return err
		}
		if err := expectCode(g.IncreaseSize(g.MaxSize()-before+1), codes.FailedPrecondition, "max"); err != nil {
			return err
		}
		after, err := g.TargetSize()
		if err == nil && after != before {
			return fmt.Errorf("target moved from %d to %d on a refused increase", before, after)
		}
		return err
	})
	s.r.Check("NodeGroup.DecreaseTargetSize(delta >= 0)", s.tag(), func() error {
		return expectCode(s.anyGroup().DecreaseTargetSize(1), codes.InvalidArgument, "delta")
	})
	s.r.Check("NodeGroup.DeleteNodes(node of another group)", s.tag(), func() error {
		owner, other := s.groupWithNodes(), (*NodeGroup)(nil)
		if owner == nil {
			return errors.New("no group has an instance")
		}
		for _, g := range sortedGroups(p) {
			if g.Id() != owner.Id() {
				other = g
				break
			}
		}
		if other == nil {
			return errors.New("needs two groups")
		}
		insts, err := owner.Nodes()
		if err != nil {
			return err
		}
		err = other.DeleteNodes([]*apiv1.Node{testNode("x", insts[0].Id, nil)})
		if err := expectCode(err, codes.InvalidArgument, insts[0].Id); err != nil {
			return err
		}
		again, err := owner.Nodes()
		if err == nil && len(again) != len(insts) {
			return fmt.Errorf("%d instances before, %d after a refused delete", len(insts), len(again))
		}
		return err
	})
}

// anyGroup is the group the scaling checks work on: the sim's "general", else a group with a
// minimum size and an instance (so the below-min refusal can be provoked), else any with an instance.
func (s *Suite) anyGroup() *NodeGroup {
	if g := s.groups["general"]; g != nil {
		return g
	}
	var withNodes *NodeGroup
	for _, g := range sortedGroups(s.ca) {
		if insts, err := g.Nodes(); err == nil && len(insts) > 0 {
			if g.MinSize() > 0 {
				return g
			}
			if withNodes == nil {
				withNodes = g
			}
		}
	}
	if withNodes != nil {
		return withNodes
	}
	return sortedGroups(s.ca)[0]
}

// seed gives a backend that starts empty one running instance, so membership, pricing and deletion
// have something to work on. The sim's demo groups start with one machine and need no seed.
func (s *Suite) seed() {
	if s.sim() || s.groupWithNodes() != nil {
		return
	}
	s.r.Check("NodeGroup.IncreaseSize(seed one running instance)", s.tag(), func() error {
		var pick *NodeGroup
		for _, g := range sortedGroups(s.ca) {
			if g.MaxSize() < 6 {
				continue
			}
			if pick == nil || (g.MinSize() > 0 && pick.MinSize() == 0) {
				pick = g
			}
		}
		if pick == nil {
			return errors.New("no group with room for the scaling checks (max size >= 6)")
		}
		n, err := pick.TargetSize()
		if err != nil {
			return err
		}
		if err := pick.IncreaseSize(max(1, pick.MinSize()-n)); err != nil {
			return err
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			insts, err := pick.Nodes()
			if err != nil {
				return err
			}
			for _, in := range insts {
				if in.Status != nil && in.Status.State == InstanceRunning {
					return nil
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		return fmt.Errorf("group %s has no running instance 30 s after IncreaseSize", pick.Id())
	})
}

func (s *Suite) groupWithNodes() *NodeGroup {
	for _, g := range sortedGroups(s.ca) {
		if insts, err := g.Nodes(); err == nil && len(insts) > 0 {
			return g
		}
	}
	return nil
}

// ---------------------------------------------------------------- scaling

func (s *Suite) scaling() {
	g := s.anyGroup()
	var start int
	s.r.Check("NodeGroup.TargetSize", s.tag(), func() error {
		n, err := g.TargetSize()
		if err != nil {
			return err
		}
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		if n != len(insts) {
			return fmt.Errorf("target %d but %d instances listed", n, len(insts))
		}
		if s.sim() && g.Id() == "general" && n != 1 {
			return fmt.Errorf("general target %d, want 1 (initial size)", n)
		}
		start = n
		return nil
	})
	s.r.Check("NodeGroup.Nodes", s.tag(), func() error {
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		for _, in := range insts {
			if in.Id == "" {
				return errors.New("instance with an empty id")
			}
			if in.Status == nil {
				return fmt.Errorf("instance %s has no state", in.Id)
			}
			if s.sim() && (!strings.HasPrefix(in.Id, "sim://"+g.Id()+"/") || in.Status.State != InstanceRunning) {
				return fmt.Errorf("instance %s state %d: want a running sim://%s/N", in.Id, in.Status.State, g.Id())
			}
		}
		return nil
	})
	s.r.Check("NodeGroup.IncreaseSize", s.tag(), func() error {
		if g.MaxSize()-start < 3 {
			return fmt.Errorf("group %s has no room for +3", g.Id())
		}
		if err := g.IncreaseSize(3); err != nil {
			return err
		}
		// The NodeGroup object came from the NodeGroups cache; TargetSize is never cached.
		n, err := g.TargetSize()
		if err != nil {
			return err
		}
		if n != start+3 {
			return fmt.Errorf("target %d after +3 from %d", n, start)
		}
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		if len(insts) != start+3 {
			return fmt.Errorf("%d instances listed for target %d", len(insts), n)
		}
		creating := 0
		for _, in := range insts {
			if in.Status == nil {
				return fmt.Errorf("instance %s has no state", in.Id)
			}
			if in.Status.State == InstanceCreating {
				creating++
			}
		}
		if s.sim() && creating != 3 {
			return fmt.Errorf("%d instances creating, want 3 (sim provisioning delay 30 s)", creating)
		}
		return nil
	})
	s.r.Check("NodeGroup.DecreaseTargetSize(below the machines the cloud has)", s.tag(), func() error {
		// The new machines exist in the cloud (booting): cancelling them is DeleteNodes' job, and
		// DecreaseTargetSize "doesn't permit to delete any existing node" (cloud_provider.go).
		before, err := g.TargetSize()
		if err != nil {
			return err
		}
		if err := expectCode(g.DecreaseTargetSize(-(g.MaxSize() + 1)), codes.FailedPrecondition, g.Id()); err != nil {
			return err
		}
		if n, _ := g.TargetSize(); n != before {
			return fmt.Errorf("target moved %d -> %d on a refused decrease", before, n)
		}
		return nil
	})
	s.r.Check("NodeGroup.DeleteNodes(registered)", s.tag(), func() error {
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		before, err := g.TargetSize()
		if err != nil {
			return err
		}
		victim := ""
		for _, in := range insts {
			if in.Status != nil && in.Status.State == InstanceRunning {
				victim = in.Id
			}
		}
		if victim == "" {
			victim = insts[len(insts)-1].Id
		}
		if err := g.DeleteNodes([]*apiv1.Node{testNode(g.Id()+"-victim", victim, map[string]string{"kubernetes.io/os": "linux"})}); err != nil {
			return err
		}
		return s.gone(g, victim, before-1)
	})
	s.r.Check("NodeGroup.DeleteNodes(unregistered)", s.tag(), func() error {
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		before, err := g.TargetSize()
		if err != nil {
			return err
		}
		victim := ""
		for _, in := range insts {
			if in.Status != nil && in.Status.State != InstanceDeleting {
				victim = in.Id
			}
		}
		if victim == "" {
			return errors.New("no live instance left")
		}
		// CA deletes an instance that never became a Node through a Node named after its providerID.
		if err := g.DeleteNodes([]*apiv1.Node{testNode(victim, victim, nil)}); err != nil {
			return err
		}
		return s.gone(g, victim, before-1)
	})
	s.r.Check("NodeGroup.DeleteNodes(below min size)", s.tag(), func() error {
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		var nodes []*apiv1.Node
		for _, in := range insts {
			if in.Status == nil || in.Status.State != InstanceDeleting {
				nodes = append(nodes, testNode(in.Id, in.Id, nil))
			}
		}
		before, _ := g.TargetSize()
		if len(nodes) == 0 || before-len(nodes) >= g.MinSize() {
			return fmt.Errorf("cannot go below min %d with %d live instances (target %d)", g.MinSize(), len(nodes), before)
		}
		if err := expectCode(g.DeleteNodes(nodes), codes.FailedPrecondition, "min"); err != nil {
			return err
		}
		after, err := g.TargetSize()
		if err == nil && after != before {
			return fmt.Errorf("target moved %d -> %d on a refused delete (must be all-or-nothing)", before, after)
		}
		return err
	})
}

// gone checks an instance deleted by DeleteNodes is no longer a live member and the target shrank.
func (s *Suite) gone(g *NodeGroup, id string, wantTarget int) error {
	n, err := g.TargetSize()
	if err != nil {
		return err
	}
	if n != wantTarget {
		return fmt.Errorf("target %d after deleting %s, want %d", n, id, wantTarget)
	}
	insts, err := g.Nodes()
	if err != nil {
		return err
	}
	for _, in := range insts {
		if in.Id == id && (in.Status == nil || in.Status.State != InstanceDeleting) {
			return fmt.Errorf("%s still listed as state %v", id, in.Status)
		}
	}
	return nil
}

func (s *Suite) errorInfo() {
	if s.faulty == nil {
		return
	}
	p := s.faulty
	// The faulty server's only group has no price and no option overrides: the pricing RPCs answer
	// UNIMPLEMENTED (ErrNotImplemented from 1.29, the raw status before), GetOptions answers no options.
	s.r.Check("PricingModel.NodePrice, PricingModel.PodPrice, NodeGroup.GetOptions (no price, no overrides)", s.tag(), func() error {
		groups := p.NodeGroups()
		if len(groups) == 0 {
			return errors.New("faulty server lists no group")
		}
		g := groups[0]
		insts, err := g.Nodes()
		if err != nil || len(insts) == 0 {
			return fmt.Errorf("faulty group has no instance to price (%v)", err)
		}
		_, errNode := p.NodePrice(testNode("n", insts[0].Id, nil), priceStart, priceStart.Add(time.Hour))
		_, errPod := p.PodPrice(testPod("1", "1Gi"), priceStart, priceStart.Add(time.Hour))
		for name, err := range map[string]error{"PricingModel.NodePrice": errNode, "PricingModel.PodPrice": errPod} {
			if s.gen.MapsUnimplemented && !errors.Is(err, ErrNotImplemented) {
				return fmt.Errorf("%s: got %v, want ErrNotImplemented", name, err)
			}
			if !s.gen.MapsUnimplemented {
				if errors.Is(err, ErrNotImplemented) {
					return fmt.Errorf("%s: got ErrNotImplemented, which this generation never produces", name)
				}
				if err := expectCode(err, codes.Unimplemented); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
		}
		opts, err := g.GetOptions(caDefaults)
		if err != nil || opts != nil {
			return fmt.Errorf("NodeGroup.GetOptions: got %v, %v; want no options and no error (CA's defaults)", opts, err)
		}
		return nil
	})
	var failed []string
	var g *NodeGroup
	s.r.Check("NodeGroup.Nodes(error info)", s.tag(), func() error {
		g = p.NodeGroups()[0]
		before, err := g.TargetSize()
		if err != nil {
			return err
		}
		if err := g.IncreaseSize(2); err != nil {
			return err
		}
		if n, err := g.TargetSize(); err != nil || n != before+2 {
			return fmt.Errorf("target %d (%v) after +2 from %d", n, err, before)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			insts, err := g.Nodes()
			if err != nil {
				return err
			}
			failed = failed[:0]
			for _, in := range insts {
				if in.Status == nil || in.Status.ErrorInfo == nil {
					continue
				}
				ei := in.Status.ErrorInfo
				if in.Status.State != InstanceCreating {
					return fmt.Errorf("failed create %s has state %d; CA reads errors on creating instances", in.Id, in.Status.State)
				}
				if ei.ErrorClass != OutOfResourcesErrorClass {
					return fmt.Errorf("stockout reported with class %d, want %d (OutOfResourcesErrorClass)", ei.ErrorClass, OutOfResourcesErrorClass)
				}
				if ei.ErrorCode == "" || ei.ErrorMessage == "" {
					return fmt.Errorf("error info %+v lacks code or message", *ei)
				}
				failed = append(failed, in.Id)
			}
			if len(failed) == 2 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of 2 stocked-out creates show error info after 10 s (instances %+v)", len(failed), insts)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	s.r.Check("NodeGroup.DeleteNodes(failed creation)", s.tag(), func() error {
		if len(failed) != 2 {
			return errors.New("needs the two failed creations of the previous check")
		}
		// CA removes instances whose creation failed with DeleteNodes, naming them by their id.
		if err := g.DeleteNodes([]*apiv1.Node{testNode(failed[0], failed[0], nil)}); err != nil {
			return err
		}
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		for _, in := range insts {
			if in.Id == failed[0] {
				return fmt.Errorf("%s still listed after DeleteNodes", in.Id)
			}
		}
		return nil
	})
	s.r.Check("NodeGroup.DecreaseTargetSize(failed creation)", s.tag(), func() error {
		if len(failed) != 2 {
			return errors.New("needs the two failed creations of the previous check")
		}
		// The other unfulfilled request is withdrawn by lowering the target (CA's fixNodeGroupSize).
		before, err := g.TargetSize()
		if err != nil {
			return err
		}
		if err := g.DecreaseTargetSize(-1); err != nil {
			return err
		}
		after, err := g.TargetSize()
		if err != nil {
			return err
		}
		if after != before-1 {
			return fmt.Errorf("target %d -> %d after DecreaseTargetSize(-1)", before, after)
		}
		insts, err := g.Nodes()
		if err != nil {
			return err
		}
		if len(insts) != after {
			return fmt.Errorf("%d instances listed for target %d", len(insts), after)
		}
		return nil
	})
}

func (s *Suite) refreshAndCleanup() {
	p := s.ca
	s.r.Check("CloudProvider.Refresh", s.tag(), func() error {
		old := p.NodeGroups()
		oldNode := testNode("refresh-probe", "", nil)
		if g := s.groupWithNodes(); g != nil {
			insts, _ := g.Nodes()
			oldNode.Spec.ProviderID = insts[0].Id
		}
		if _, err := p.NodeGroupForNode(oldNode); err != nil {
			return err
		}
		if err := p.Refresh(); err != nil {
			return err
		}
		ngCalls, nfnCalls, tplCalls := p.calls.count("NodeGroups"), p.calls.count("NodeGroupForNode"), p.calls.count("NodeGroupTemplateNodeInfo")
		fresh := p.NodeGroups()
		if p.calls.count("NodeGroups") != ngCalls+1 {
			return errors.New("NodeGroups cache survived Refresh")
		}
		if len(fresh) != len(old) || (len(old) > 0 && fresh[0] == old[0]) {
			return errors.New("Refresh did not yield new NodeGroup objects")
		}
		if _, err := p.NodeGroupForNode(oldNode); err != nil {
			return err
		}
		if p.calls.count("NodeGroupForNode") != nfnCalls+1 {
			return errors.New("NodeGroupForNode cache survived Refresh")
		}
		// Templates are cached per NodeGroup object: the new objects ask again.
		if _, err := fresh[0].TemplateNodeInfo(); err != nil && !p.ca.Declined(err) {
			return err
		}
		if p.calls.count("NodeGroupTemplateNodeInfo") != tplCalls+1 {
			return errors.New("a new NodeGroup object reused another object's template")
		}
		return nil
	})
	s.r.Check("every RPC above (answered within grpc_timeout)", s.tag(), func() error {
		clients := map[string]*Provider{"main server": s.ca, "faulty server": s.faulty}
		for _, name := range keys(clients) {
			c := clients[name]
			if c == nil {
				continue
			}
			if c.slowest >= c.grpcTimeout {
				return fmt.Errorf("%s: %s took %v (deadline %v)", name, c.slowRPC, c.slowest, c.grpcTimeout)
			}
			s.r.Info(fmt.Sprintf("%s: slowest call %s %v of %v", name, c.slowRPC, c.slowest.Round(time.Millisecond), c.grpcTimeout))
		}
		return nil
	})
	s.r.Check("CloudProvider.Cleanup", s.tag(), func() error {
		return p.Cleanup()
	})
}
