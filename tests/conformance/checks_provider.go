package main

// The provider-wide checks: the GPU calls CA caches for the life of the process, NodeGroupForNode
// for a member, a node in no group and a control-plane node, and the end of a run: Refresh drops
// every per-loop cache, every call answered within the deadline, Cleanup.

import (
	"errors"
	"fmt"
	"time"
)

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
