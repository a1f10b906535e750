package main

// What a replayed loop does besides reading (see loop.go for the model): the deletion of instances
// that never registered, through the fake nodes CA builds for them, and the price expander's
// evaluation of a scale-up.

import (
	"fmt"
	"time"

	"cloudprovider-grpc/tests/conformance/caclient"
	apiv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeNodeReason is the annotation CA puts on the placeholder Node of an instance that never
// registered (cloudprovider.FakeNodeReasonAnnotation, value cloudprovider.FakeNodeUnregistered).
const fakeNodeReason, fakeNodeUnregistered = "k8s.io/cluster-autoscaler/fake-node-reason", "unregistered"

// stabilizationPod is the price expander's own pod, priced once per evaluation: 500m CPU, 500Mi
// (expander/price/price.go:55, "stabilize").
func stabilizationPod() *apiv1.Pod {
	return &apiv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stabilize", Namespace: "default"},
		Spec: apiv1.PodSpec{Containers: []apiv1.Container{{
			Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
				apiv1.ResourceCPU: resource.MustParse("500m"), apiv1.ResourceMemory: resource.MustParse("500Mi"),
			}},
		}}},
	}
}

// pendingPod is the pod a priced scale-up is for: 500m CPU, 1Gi.
func pendingPod() *apiv1.Pod {
	return &apiv1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "default"},
		Spec: apiv1.PodSpec{Containers: []apiv1.Container{{
			Name: "app",
			Resources: apiv1.ResourceRequirements{Requests: apiv1.ResourceList{
				apiv1.ResourceCPU: resource.MustParse("500m"), apiv1.ResourceMemory: resource.MustParse("1Gi"),
			}},
		}}},
	}
}

// deleteUnregistered is CA's removeOldUnregisteredNodes (core/static_autoscaler.go) for instances
// listed that never registered (not deleting, no error), taken as older than max-node-provision-time:
// per instance NodeGroupForNode of its fake node and GetOptions (the group's max provision time);
// per group TargetSize, GetOptions (zero-or-max scaling) and one DeleteNodes of the fake nodes; then
// the group's instance-cache entry is dropped. What the server did is checked (checkDeleted).
func (r *replay) deleteUnregistered(i int, groups []*caclient.NodeGroup) error {
	byGroup := map[string][]*apiv1.Node{}
	for _, listed := range groups {
		insts, _ := r.cache.get(listed.Id())
		for _, inst := range insts {
			if r.registered[inst.Id] || (inst.Status != nil && (inst.Status.State == caclient.InstanceDeleting || inst.Status.ErrorInfo != nil)) {
				continue
			}
			fake := &apiv1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: inst.Id, Annotations: map[string]string{fakeNodeReason: fakeNodeUnregistered}},
				Spec:       apiv1.NodeSpec{ProviderID: inst.Id},
			}
			g, err := r.ca.NodeGroupForNode(fake)
			r.calls.add(i, "NodeGroupForNode", 1)
			if err != nil || g == nil {
				return fmt.Errorf("NodeGroupForNode(fake node %s, listed in %s): %v, %v", inst.Id, listed.Id(), g, err)
			}
			if _, err := g.GetOptions(r.defaults); err != nil && err != caclient.ErrNotImplemented {
				return fmt.Errorf("GetOptions(%s): %w", g.Id(), err)
			}
			r.calls.add(i, "NodeGroupGetOptions", 1)
			byGroup[g.Id()] = append(byGroup[g.Id()], fake)
		}
	}
	for _, g := range groups {
		fakes := byGroup[g.Id()]
		if len(fakes) == 0 {
			continue
		}
		before, err := g.TargetSize()
		r.calls.add(i, "NodeGroupTargetSize", 1)
		if err != nil {
			return fmt.Errorf("TargetSize(%s): %w", g.Id(), err)
		}
		if _, err := g.GetOptions(r.defaults); err != nil && err != caclient.ErrNotImplemented {
			return fmt.Errorf("GetOptions(%s): %w", g.Id(), err)
		}
		r.calls.add(i, "NodeGroupGetOptions", 1)
		if err := g.DeleteNodes(fakes); err != nil {
			return fmt.Errorf("DeleteNodes(%s, %d fake nodes): %w", g.Id(), len(fakes), err)
		}
		r.calls.add(i, "NodeGroupDeleteNodes", 1)
		r.cache.drop(g.Id()) // the next loop lists the group again
		if err := r.checkDeleted(i, g, before, fakes); err != nil {
			return err
		}
		r.fake += len(fakes)
	}
	return nil
}

// checkDeleted: the server found each fake node by its providerID: the target size went down by
// their number and none of them is listed as anything but deleting.
func (r *replay) checkDeleted(i int, g *caclient.NodeGroup, before int, fakes []*apiv1.Node) error {
	after, err := g.TargetSize()
	r.calls.add(i, "NodeGroupTargetSize", 1)
	if err != nil {
		return fmt.Errorf("TargetSize(%s): %w", g.Id(), err)
	}
	if after != before-len(fakes) {
		return fmt.Errorf("DeleteNodes(%s) of %d fake nodes: target size %d -> %d", g.Id(), len(fakes), before, after)
	}
	insts, err := g.Nodes()
	r.calls.add(i, "NodeGroupNodes", 1)
	if err != nil {
		return fmt.Errorf("Nodes(%s): %w", g.Id(), err)
	}
	for _, inst := range insts {
		for _, f := range fakes {
			if inst.Id == f.Spec.ProviderID && (inst.Status == nil || inst.Status.State != caclient.InstanceDeleting) {
				return fmt.Errorf("DeleteNodes(%s): %s is still listed, not deleting: %+v", g.Id(), inst.Id, inst.Status)
			}
		}
	}
	return nil
}

// price is the price expander on one scale-up: the stabilization pod once, then per group its
// sanitized template node and each pending pod, over the next hour (expander/price/price.go:107-132).
func (r *replay) price(i int, groups []*caclient.NodeGroup) error {
	start := time.Now()
	end := start.Add(time.Hour)
	if _, err := r.ca.PodPrice(stabilizationPod(), start, end); err != nil && err != caclient.ErrNotImplemented {
		return fmt.Errorf("PodPrice(stabilization pod): %w", err)
	}
	r.calls.add(i, "PricingPodPrice", 1)
	for _, g := range groups {
		name := fmt.Sprintf("template-node-for-%s-%d", g.Id(), r.rng.Int63())
		node := &apiv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}}
		if _, err := r.ca.NodePrice(node, start, end); err != nil && err != caclient.ErrNotImplemented {
			return fmt.Errorf("NodePrice(%s): %w", name, err)
		}
		r.calls.add(i, "PricingNodePrice", 1)
		for p := 0; p < r.m.pendingPods; p++ {
			if _, err := r.ca.PodPrice(r.pod, start, end); err != nil && err != caclient.ErrNotImplemented {
				return fmt.Errorf("PodPrice: %w", err)
			}
		}
		r.calls.add(i, "PricingPodPrice", r.m.pendingPods)
	}
	return nil
}
