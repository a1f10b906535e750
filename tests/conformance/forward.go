package main

// Checks of what differs between client generations outside the wire schema: how the cloud-config
// is read, and what a CA newer than the server's proto sends (fields the server does not know). And
// `conformance getters`, which shows what an UNIMPLEMENTED answer to NodeGroupGetOptions does to CA's
// config processor at each generation.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	"cloudprovider-grpc/tests/conformance/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// cloudConfigReading checks that the client reads its cloud-config as its generation does.
func (s *Suite) cloudConfigReading() {
	s.r.Check("CloudProvider.BuildExternalGrpc (grpc_timeout: 7s)", s.tag(), func() error {
		path, err := variantConfig(s.cfg.cloudConfig, func(c *cloudConfig) { c.Deadline = 7 * time.Second })
		if err != nil {
			return err
		}
		defer os.Remove(path)
		p, err := caclient.Build(path, s.gen)
		if err != nil {
			return err
		}
		defer p.Close()
		want := 7 * time.Second
		if !s.gen.ConfigTimeout {
			want = caclient.DefaultGRPCTimeout // grpc_timeout is not a key before 1.29
		}
		if p.Timeout() != want {
			return fmt.Errorf("deadline %v, want %v", p.Timeout(), want)
		}
		return nil
	})
	s.r.Check("CloudProvider.BuildExternalGrpc (key spelt `Address`)", s.tag(), func() error {
		c, err := caclient.ReadCloudConfig(s.cfg.cloudConfig)
		if err != nil {
			return err
		}
		f, err := os.CreateTemp("", "cloud-config-*.yaml")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		if _, err := fmt.Fprintf(f, "Address: %q\n", c.Address); err != nil {
			return err
		}
		_ = f.Close()
		p, err := caclient.Build(f.Name(), s.gen)
		switch {
		case s.gen.ConfigDialect == caclient.DialectYAMLv2 && err == nil:
			_ = p.Close()
			return errors.New("gopkg.in/yaml.v2 matches keys exactly: `Address` must leave the address empty and the build fail")
		case s.gen.ConfigDialect == caclient.DialectJSONTags && err != nil:
			return fmt.Errorf("sigs.k8s.io/yaml matches keys as encoding/json does, regardless of case: %v", err)
		case err == nil:
			_ = p.Close()
		}
		return nil
	})
}

// unknownFields sends every read-only request twice, without and with fields no release declares,
// on a fresh client (empty caches, so every call goes over the wire), and compares the answers.
func (s *Suite) unknownFields() {
	s.r.Check("every read-only RPC (unknown fields of every wire type in every message: same answer; options echo them)", s.tag(), func() error {
		p, err := BuildExternalGrpc(s.cfg.cloudConfig, s.cfg.metrics, s.gen)
		if err != nil {
			return err
		}
		defer p.ca.Close()
		p.ca.StartTwin()
		groups := sortedGroups(p)
		_ = p.GPULabel()
		_ = p.GetAvailableGPUTypes()
		var member *NodeGroup
		var instance string
		for _, g := range groups {
			_, _ = g.TargetSize()
			if insts, err := g.Nodes(); err == nil && len(insts) > 0 && member == nil {
				member, instance = g, insts[0].Id
			}
			_, _ = g.TemplateNodeInfo()
			_, _ = g.GetOptions(caDefaults)
		}
		stranger := testNode("not-a-member", "", map[string]string{"kubernetes.io/os": "linux"})
		_, _ = p.NodeGroupForNode(stranger)
		if member != nil {
			_, _ = p.NodeGroupForNode(testNode(member.Id()+"-node", instance, nil))
			_, _ = p.NodePrice(testNode(member.Id()+"-node", instance, nil), priceStart, priceStart.Add(time.Hour))
		}
		_, _ = p.PodPrice(testPod("1", "2Gi"), priceStart, priceStart.Add(time.Hour))
		if len(groups) > 0 {
			_ = groups[0].IncreaseSize(0)       // refused: INVALID_ARGUMENT either way
			_ = groups[0].DecreaseTargetSize(1) // refused
		}
		_ = p.Refresh()
		calls, echoed, problems := p.ca.StopTwin()
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "\n      "))
		}
		rpcs := make([]string, 0, len(calls))
		for rpc, n := range calls {
			rpcs = append(rpcs, fmt.Sprintf("%s x%d", rpc, n))
		}
		sort.Strings(rpcs)
		s.r.Info(fmt.Sprintf("compared: %s; options answers echoing the unknown fields: %d", strings.Join(rpcs, ", "), echoed))
		if s.sim() && s.readsMaxNodeProvision() && echoed == 0 {
			return errors.New("the gpu group's options came back without the defaults' unknown fields")
		}
		if !s.readsMaxNodeProvision() && echoed > 0 {
			return errors.New("options served to a client that reads no max node provision time")
		}
		return nil
	})
}

// ---------------------------------------------------------------- conformance getters

// declining answers NodeGroups with one group and every other RPC, NodeGroupGetOptions included, with
// the generated code's UNIMPLEMENTED: what a server without GetOptions answers. No server of this
// project answers so any more; this stands in for one that does.
type declining struct {
	pb.UnimplementedCloudProviderServer
}

func (declining) NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	return &pb.NodeGroupsResponse{NodeGroups: []*pb.NodeGroup{{Id: "ng", MinSize: 0, MaxSize: 3}}}, nil
}

// empty answers NodeGroupGetOptions with no options, as this project's server does for a group
// without overrides.
type empty struct{ declining }

func (empty) NodeGroupGetOptions(context.Context, *pb.NodeGroupAutoscalingOptionsRequest) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	return &pb.NodeGroupAutoscalingOptionsResponse{}, nil
}

// gettersMain runs every config-processor getter of the generation against both stand-ins and prints
// one tab-separated line per getter: getters, generation, answer, getter, outcome ("error: ..." or
// "default" or "value: ...").
func gettersMain(generation string) int {
	gen, err := caclient.GenerationByName(generation)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	processor := caclient.ConfigProcessor{Defaults: caDefaults}
	for _, answer := range []struct {
		name string
		impl pb.CloudProviderServer
	}{{"UNIMPLEMENTED", declining{}}, {"empty", empty{}}} {
		lines, err := gettersAgainst(gen, processor, answer.impl)
		if err != nil {
			fmt.Fprintf(os.Stderr, "getters against %s: %v\n", answer.name, err)
			return 1
		}
		for _, l := range lines {
			fmt.Printf("getters\t%s\t%s\t%s\t%s\n", gen.Name, answer.name, l[0], l[1])
		}
	}
	return 0
}

func gettersAgainst(gen caclient.Generation, processor caclient.ConfigProcessor, impl pb.CloudProviderServer) ([][2]string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pb.RegisterCloudProviderServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	f, err := os.CreateTemp("", "cloud-config-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := fmt.Fprintf(f, "address: %q\n", lis.Addr().String()); err != nil {
		return nil, err
	}
	_ = f.Close()
	p, err := caclient.Build(f.Name(), gen)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	groups := p.NodeGroups()
	if len(groups) != 1 {
		return nil, fmt.Errorf("%d groups listed, want 1", len(groups))
	}
	var out [][2]string
	for _, name := range gen.ConfigGetters {
		v, err := processor.Get(groups[0], name)
		outcome := fmt.Sprintf("value: %v", v)
		switch {
		case err != nil:
			st, _ := status.FromError(err)
			outcome = fmt.Sprintf("error: %s %s", st.Code(), st.Message())
		case v == processor.DefaultOf(name):
			outcome = "default"
		}
		out = append(out, [2]string{name, outcome})
	}
	return out, nil
}
