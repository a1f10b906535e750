package caclient

// The node-group half of the client. A NodeGroup object holds what the listing said (id, min, max,
// debug) for its whole life; CA builds new objects after every Refresh, and the ones NodeGroupForNode
// returns are distinct from the listed ones.

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	apiv1 "k8s.io/api/core/v1"
)

// InstanceState is CA's instance state (the wire enum's numbers).
type InstanceState int

// The states CA tells apart; 0 ("unspecified") becomes an instance without a status.
const (
	InstanceRunning  InstanceState = 1
	InstanceCreating InstanceState = 2
	InstanceDeleting InstanceState = 3
)

// InstanceErrorClass is CA's class of a failed instance operation.
type InstanceErrorClass int

// The classes CA tells apart.
const (
	OutOfResourcesErrorClass InstanceErrorClass = 1
	OtherErrorClass          InstanceErrorClass = 99
)

// InstanceErrorInfo is what CA keeps of an instance's error.
type InstanceErrorInfo struct {
	ErrorClass   InstanceErrorClass
	ErrorCode    string
	ErrorMessage string
}

// InstanceStatus is nil on an instance whose state is unspecified.
type InstanceStatus struct {
	State     InstanceState
	ErrorInfo *InstanceErrorInfo
}

// Instance is one machine of a group.
type Instance struct {
	Id     string
	Status *InstanceStatus
}

// Options are the per-group autoscaling options CA asks for (sending its own as defaults).
type Options struct {
	ScaleDownUtilizationThreshold    float64
	ScaleDownGpuUtilizationThreshold float64
	ScaleDownUnneededTime            time.Duration
	ScaleDownUnreadyTime             time.Duration
	MaxNodeProvisionTime             time.Duration
	ZeroOrMaxNodeScaling             bool
	IgnoreDaemonSetsUtilization      bool
	// MaxNodeStartupTime travels only where the generation declares maxNodeStartupDuration (1.37+);
	// elsewhere it is never sent and reads as 0, as CA 1.35-1.36's client leaves it.
	MaxNodeStartupTime time.Duration
}

// ErrWouldPanic marks an answer on which the generation's CA dereferences a nil pointer: releases
// up to 1.34.x read the legacy option durations without a nil check.
var ErrWouldPanic = errors.New("CA would panic (nil pointer dereference)")

// NodeGroup is one group as CA holds it.
type NodeGroup struct {
	provider         *CloudProvider
	id, debug        string
	minSize, maxSize int
	templateMu       sync.Mutex
	template         **apiv1.Node // nil: not asked yet; *template == nil: "no template"
}

func (g *NodeGroup) Id() string    { return g.id }
func (g *NodeGroup) MinSize() int  { return g.minSize }
func (g *NodeGroup) MaxSize() int  { return g.maxSize }
func (g *NodeGroup) Debug() string { return g.debug }

func (g *NodeGroup) idOnly(req protoreflect.Message) error {
	setScalar(req, "id", g.id)
	return nil
}

// TargetSize is never cached.
func (g *NodeGroup) TargetSize() (int, error) {
	resp, err := g.provider.invoke("NodeGroupTargetSize", g.idOnly)
	if err != nil {
		return 0, err
	}
	return int(getInt(resp, "targetSize")), nil
}

// IncreaseSize asks for delta more machines.
func (g *NodeGroup) IncreaseSize(delta int) error {
	_, err := g.provider.invoke("NodeGroupIncreaseSize", func(req protoreflect.Message) error {
		setScalar(req, "delta", int32(delta))
		return g.idOnly(req)
	})
	return err
}

// DecreaseTargetSize lowers the target by -delta without deleting machines.
func (g *NodeGroup) DecreaseTargetSize(delta int) error {
	_, err := g.provider.invoke("NodeGroupDecreaseTargetSize", func(req protoreflect.Message) error {
		setScalar(req, "delta", int32(delta))
		return g.idOnly(req)
	})
	return err
}

// DeleteNodes removes the named nodes (each sent as providerID, name, labels, annotations).
func (g *NodeGroup) DeleteNodes(nodes []*apiv1.Node) error {
	_, err := g.provider.invoke("NodeGroupDeleteNodes", func(req protoreflect.Message) error {
		list := req.Mutable(field(req, "nodes")).List()
		for _, n := range nodes {
			elem := list.NewElement()
			fillNode(elem.Message(), n)
			list.Append(elem)
		}
		return g.idOnly(req)
	})
	return err
}

// Nodes lists the group's machines; never cached by the client.
func (g *NodeGroup) Nodes() ([]Instance, error) {
	resp, err := g.provider.invoke("NodeGroupNodes", g.idOnly)
	if err != nil {
		return nil, err
	}
	list := resp.Get(field(resp, "instances")).List()
	out := make([]Instance, 0, list.Len())
	for i := 0; i < list.Len(); i++ {
		m := list.Get(i).Message()
		inst := Instance{Id: getString(m, "id")}
		if st := getMessage(m, "status"); st != nil {
			state := InstanceState(st.Get(field(st, "instanceState")).Enum())
			if state != 0 {
				inst.Status = &InstanceStatus{State: state}
				if ei := getMessage(st, "errorInfo"); ei != nil && getString(ei, "errorCode") != "" {
					inst.Status.ErrorInfo = &InstanceErrorInfo{
						ErrorClass:   InstanceErrorClass(getInt(ei, "instanceErrorClass")),
						ErrorCode:    getString(ei, "errorCode"),
						ErrorMessage: getString(ei, "errorMessage"),
					}
				}
			}
		}
		out = append(out, inst)
	}
	return out, nil
}

// TemplateNodeInfo is the group's template Node, cached on this object ("no template" included).
// The Node is read from nodeBytes where the generation declares it and the server sent it, else from
// the embedded legacy nodeInfo where declared; absent both, the group has no template (nil, nil).
// UNIMPLEMENTED -> ErrNotImplemented from 1.29 (raw before), not cached.
func (g *NodeGroup) TemplateNodeInfo() (*apiv1.Node, error) {
	g.templateMu.Lock()
	defer g.templateMu.Unlock()
	if g.template != nil {
		return *g.template, nil
	}
	resp, err := g.provider.invoke("NodeGroupTemplateNodeInfo", g.idOnly)
	if err != nil {
		return nil, g.provider.optional(err)
	}
	var raw []byte
	if hasField(resp, "nodeBytes") {
		raw = getBytes(resp, "nodeBytes")
	}
	if len(raw) == 0 && hasField(resp, "nodeInfo") {
		raw = getOpaque(resp, "nodeInfo")
	}
	if raw == nil {
		g.template = new(*apiv1.Node)
		return nil, nil
	}
	node := &apiv1.Node{}
	if err := node.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("template of %s: %w", g.id, err)
	}
	g.template = &node
	return node, nil
}

// GetOptions asks for the group's options, sending `defaults` in every field the generation
// declares. A missing options message means "use the defaults" (nil, nil).
func (g *NodeGroup) GetOptions(defaults Options) (*Options, error) {
	resp, err := g.provider.invoke("NodeGroupGetOptions", func(req protoreflect.Message) error {
		var ferr error
		setMessage(req, "defaults", func(m protoreflect.Message) { ferr = fillOptions(m, defaults) })
		if ferr != nil {
			return ferr
		}
		return g.idOnly(req)
	})
	if err != nil {
		return nil, g.provider.optional(err)
	}
	pb := getMessage(resp, "nodeGroupAutoscalingOptions")
	if pb == nil {
		return nil, nil
	}
	opts := &Options{
		ScaleDownUtilizationThreshold:    getFloat(pb, "scaleDownUtilizationThreshold"),
		ScaleDownGpuUtilizationThreshold: getFloat(pb, "scaleDownGpuUtilizationThreshold"),
	}
	if hasField(pb, "zeroOrMaxNodeScaling") {
		opts.ZeroOrMaxNodeScaling = getBool(pb, "zeroOrMaxNodeScaling")
		opts.IgnoreDaemonSetsUtilization = getBool(pb, "ignoreDaemonSetsUtilization")
	}
	for _, d := range optionDurations {
		value, err := readDuration(pb, d.current, d.legacy)
		if err != nil {
			return nil, err
		}
		*d.of(opts) = value
	}
	return opts, nil
}

// optionDurations pairs each duration option with its current (google.protobuf.Duration) and legacy
// (meta Duration, nanoseconds) field.
var optionDurations = []struct {
	current, legacy string
	of              func(*Options) *time.Duration
}{
	{"scaleDownUnneededDuration", "scaleDownUnneededTime", func(o *Options) *time.Duration { return &o.ScaleDownUnneededTime }},
	{"scaleDownUnreadyDuration", "scaleDownUnreadyTime", func(o *Options) *time.Duration { return &o.ScaleDownUnreadyTime }},
	{"MaxNodeProvisionDuration", "MaxNodeProvisionTime", func(o *Options) *time.Duration { return &o.MaxNodeProvisionTime }},
	{"maxNodeStartupDuration", "", func(o *Options) *time.Duration { return &o.MaxNodeStartupTime }}, // no legacy field
}

// readDuration reads one option duration the way the generation does: the current field when
// declared and present; else the legacy field when declared, which CA dereferences unchecked (absent
// = a panic in CA); else zero (a current-only client reads an absent Duration as 0; a client that
// declares neither never reads the option).
func readDuration(pb protoreflect.Message, current, legacy string) (time.Duration, error) {
	if hasField(pb, current) {
		if d, ok := getDuration(pb, current); ok {
			return d, nil
		}
	}
	if hasField(pb, legacy) {
		raw := getOpaque(pb, legacy)
		if raw == nil {
			return 0, fmt.Errorf("%w: %s absent", ErrWouldPanic, legacy)
		}
		return metaDuration(raw)
	}
	return 0, nil
}

// fillOptions writes CA's defaults into every options field the generation declares.
func fillOptions(m protoreflect.Message, o Options) error {
	setScalar(m, "scaleDownUtilizationThreshold", o.ScaleDownUtilizationThreshold)
	setScalar(m, "scaleDownGpuUtilizationThreshold", o.ScaleDownGpuUtilizationThreshold)
	if hasField(m, "zeroOrMaxNodeScaling") {
		setScalar(m, "zeroOrMaxNodeScaling", o.ZeroOrMaxNodeScaling)
		setScalar(m, "ignoreDaemonSetsUtilization", o.IgnoreDaemonSetsUtilization)
	}
	for _, d := range optionDurations {
		value := *d.of(&o)
		if hasField(m, d.legacy) {
			raw, err := metaDurationBytes(value)
			if err != nil {
				return err
			}
			setOpaque(m, d.legacy, raw)
		}
		if hasField(m, d.current) {
			setDuration(m, d.current, value)
		}
	}
	return nil
}
