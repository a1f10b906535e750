package main

// The read-only checks of each group: NodeGroups, TemplateNodeInfo, GetOptions (and the getters
// of CA's NodeGroupConfigProcessor over it) and the two pricing calls. Each takes the provider it
// runs against, so the same checks cover every client generation.

import (
	"errors"
	"fmt"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	apiv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

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
			if opts != nil && !s.getsOverrides() {
				return fmt.Errorf("options %+v served to a client that reads no max node startup time and would use 0 (kubernetes/autoscaler#10245); answer no options", *opts)
			}
			if opts != nil {
				for name, v := range map[string]float64{"scaleDownUtilizationThreshold": opts.ScaleDownUtilizationThreshold, "scaleDownGpuUtilizationThreshold": opts.ScaleDownGpuUtilizationThreshold} {
					if v <= 0 || v > 1 {
						return fmt.Errorf("%s = %v, outside (0, 1]", name, v)
					}
				}
				durations := map[string]time.Duration{"scaleDownUnneeded": opts.ScaleDownUnneededTime, "scaleDownUnready": opts.ScaleDownUnreadyTime, "maxNodeProvision": opts.MaxNodeProvisionTime}
				if s.readsMaxNodeStartup() {
					durations["maxNodeStartup"] = opts.MaxNodeStartupTime
				}
				for name, d := range durations {
					if d <= 0 {
						return fmt.Errorf("%s = %v: CA would act on a zero duration", name, d)
					}
				}
			}
			if !s.sim() {
				return nil
			}
			if g.Id() == "gpu" && s.getsOverrides() {
				// gpu overrides: scale_down_unneeded_time 300 s, utilization threshold 0.3 and (read by
				// 1.37+ only, from field 11) max_node_startup_time 1200 s; the rest are CA's defaults
				// sent in the request.
				want := s.wantDefaults()
				want.ScaleDownUnneededTime = 5 * time.Minute
				want.ScaleDownUtilizationThreshold = 0.3
				if s.readsMaxNodeStartup() {
					want.MaxNodeStartupTime = 20 * time.Minute
				}
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
