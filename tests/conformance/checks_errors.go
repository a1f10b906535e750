package main

// The error checks: what status each bad request gets (an unknown group, a delta of the wrong
// sign, a size past the bounds, a node of another group) and, against the optional faulty server
// whose group always stocks out, the answers without price or options, the error info of failed
// creations and how CA gets rid of them.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloudprovider-grpc/tests/conformance/pb"
	"google.golang.org/grpc/codes"
	apiv1 "k8s.io/api/core/v1"
)

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
