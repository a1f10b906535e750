package main

// `conformance bench`: RPC latency as cluster-autoscaler's Go client sees it. benchmarks/rpc_latency.py
// runs it against the same server it measures from Python, so the docs can state what CA gets
// (a Go client, serial calls, one connection) next to the Python figures. Every sample is one RPC on
// the wire under the usual grpc_timeout deadline: the CA-faithful client's NodeGroup methods where CA
// does not cache (TargetSize, Nodes, GetOptions), the generated stub where it does (NodeGroups,
// NodeGroupForNode, TemplateNodeInfo).

import (
	"fmt"
	"math/rand"
	"sort"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	"cloudprovider-grpc/tests/conformance/pb"
)

func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}

func benchmark(cloudConfig string, calls int) int {
	p, err := BuildExternalGrpc(cloudConfig, "", caclient.Generations[0])
	if err != nil {
		fmt.Println("bench:", err)
		return 1
	}
	client, closeConn, err := stub(cloudConfig, nil)
	if err != nil {
		fmt.Println("bench:", err)
		return 1
	}
	defer closeConn()
	groups := p.NodeGroups()
	if len(groups) == 0 {
		fmt.Println("bench: the server has no node groups")
		return 1
	}
	rng := rand.New(rand.NewSource(7))
	var nodes []*pb.ExternalGrpcNode
	for i := 0; i < 50 && i < len(groups); i++ {
		instances, err := groups[rng.Intn(len(groups))].Nodes()
		if err != nil {
			fmt.Println("bench:", err)
			return 1
		}
		for _, inst := range instances {
			nodes = append(nodes, &pb.ExternalGrpcNode{ProviderID: inst.Id})
		}
	}
	group := func() *NodeGroup { return groups[rng.Intn(len(groups))] }
	defaults := NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold: 0.5, ScaleDownUnneededTime: 10 * time.Minute,
		ScaleDownUnreadyTime: 20 * time.Minute, MaxNodeProvisionTime: 15 * time.Minute,
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"NodeGroups", func() error {
			ctx, cancel := withTimeout()
			defer cancel()
			_, err := client.NodeGroups(ctx, &pb.NodeGroupsRequest{})
			return err
		}},
		{"NodeGroupForNode", func() error {
			ctx, cancel := withTimeout()
			defer cancel()
			_, err := client.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: nodes[rng.Intn(len(nodes))]})
			return err
		}},
		{"NodeGroupTargetSize", func() error { _, err := group().TargetSize(); return err }},
		{"NodeGroupGetOptions", func() error { _, err := group().GetOptions(defaults); return err }},
		{"NodeGroupNodes", func() error { _, err := group().Nodes(); return err }},
		{"NodeGroupTemplateNodeInfo", func() error {
			ctx, cancel := withTimeout()
			defer cancel()
			_, err := client.NodeGroupTemplateNodeInfo(ctx, &pb.NodeGroupTemplateNodeInfoRequest{Id: group().Id()})
			return err
		}},
	}
	fmt.Printf("Go client (CA's call path), %d serial calls per RPC\n", calls)
	fmt.Printf("%-28s%9s%9s%9s%10s\n", "RPC", "p50 ms", "p99 ms", "max ms", "calls/s")
	for _, c := range cases {
		for i := 0; i < 200; i++ {
			if err := c.call(); err != nil {
				fmt.Printf("bench: %s: %v\n", c.name, err)
				return 1
			}
		}
		samples := make([]time.Duration, 0, calls)
		start := time.Now()
		for i := 0; i < calls; i++ {
			t := time.Now()
			if err := c.call(); err != nil {
				fmt.Printf("bench: %s: %v\n", c.name, err)
				return 1
			}
			samples = append(samples, time.Since(t))
		}
		wall := time.Since(start)
		sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		fmt.Printf("%-28s%9.3f%9.3f%9.3f%10.0f\n", c.name, ms(percentile(samples, 0.50)),
			ms(percentile(samples, 0.99)), ms(samples[len(samples)-1]), float64(calls)/wall.Seconds())
	}
	return 0
}
