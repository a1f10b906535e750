package main

// The scaling checks: TargetSize, Nodes, IncreaseSize, DecreaseTargetSize and DeleteNodes (of a
// registered node, of CA's placeholder for an unregistered one, below the minimum), on one group
// chosen for them, after giving a backend that starts empty one running instance.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	apiv1 "k8s.io/api/core/v1"
)

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
