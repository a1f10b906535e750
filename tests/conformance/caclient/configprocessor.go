package caclient

// CA's node-group config processor, the only reader of NodeGroup.GetOptions. Each per-group getter
// asks GetOptions with CA's own defaults and then (processors/nodegroupconfig/
// node_group_config_processor.go, identical in this respect at cluster-autoscaler-1.25.0, -1.28.7,
// -1.29.0 and -1.36.1):
//   - any error other than cloudprovider.ErrNotImplemented is returned to the caller, with a zero
//     value: scale-down marks the node's candidacy as failed, and so on for every user of the getter;
//   - ErrNotImplemented, or no options at all (nil, nil), yields CA's default for that option;
//   - otherwise the option as the provider answered it.
// Which error the getter sees is the client's doing: before 1.29 an UNIMPLEMENTED status arrives
// raw, and so reaches every getter as an error.

import (
	"errors"
	"fmt"
)

// ConfigProcessor models CA's DelegatingNodeGroupConfigProcessor for one client.
type ConfigProcessor struct {
	Defaults Options
}

// Get is getter `name` (one of Generation.ConfigGetters, without CA's "Get" prefix) for group g.
func (c ConfigProcessor) Get(g *NodeGroup, name string) (any, error) {
	pick, ok := optionOf[name]
	if !ok {
		return nil, fmt.Errorf("no config getter %q", name)
	}
	opts, err := g.GetOptions(c.Defaults)
	if err != nil && !errors.Is(err, ErrNotImplemented) {
		return pick(Options{}), err
	}
	if opts == nil || err != nil {
		return pick(c.Defaults), nil
	}
	return pick(*opts), nil
}

// optionOf maps each getter to the option it returns.
var optionOf = map[string]func(Options) any{
	"ScaleDownUnneededTime":            func(o Options) any { return o.ScaleDownUnneededTime },
	"ScaleDownUnreadyTime":             func(o Options) any { return o.ScaleDownUnreadyTime },
	"ScaleDownUtilizationThreshold":    func(o Options) any { return o.ScaleDownUtilizationThreshold },
	"ScaleDownGpuUtilizationThreshold": func(o Options) any { return o.ScaleDownGpuUtilizationThreshold },
	"MaxNodeProvisionTime":             func(o Options) any { return o.MaxNodeProvisionTime },
	"IgnoreDaemonSetsUtilization":      func(o Options) any { return o.IgnoreDaemonSetsUtilization },
	"MaxNodeStartupTime":               func(o Options) any { return o.MaxNodeStartupTime },
}

// DefaultOf is the value getter `name` yields from CA's defaults alone.
func (c ConfigProcessor) DefaultOf(name string) any { return optionOf[name](c.Defaults) }
