package main

// A server that filled the legacy `nodeInfo` and the current `nodeBytes` with different Nodes would
// pass every generation that reads only one of them and still mislead CA 1.34.2-1.34.x, which reads
// `nodeBytes` and falls back to `nodeInfo`. For a generation that declares both, the two must carry
// identical bytes.

import (
	"errors"
	"fmt"
)

func (s *Suite) dualTemplateFields() {
	if !s.ca.ca.Declares("NodeGroupTemplateNodeInfoResponse", "nodeInfo") || !s.ca.ca.Declares("NodeGroupTemplateNodeInfoResponse", "nodeBytes") {
		return // the generation reads one field only
	}
	s.r.Check("NodeGroup.TemplateNodeInfo(nodeInfo == nodeBytes)", s.tag(), func() error {
		for _, g := range sortedGroups(s.ca) {
			legacy, current, both, err := s.ca.ca.TemplateFields(g.Id())
			if errors.Is(err, ErrNotImplemented) && !s.sim() {
				continue // a backend without templates
			}
			if err != nil {
				return err
			}
			if !both {
				return errors.New("the generation declares both fields but the client saw only one")
			}
			if legacy == nil || current == nil {
				return fmt.Errorf("group %s: nodeInfo present=%v nodeBytes present=%v; both must be sent for 1.34.2", g.Id(), legacy != nil, current != nil)
			}
			if string(legacy) != string(current) {
				return fmt.Errorf("group %s: nodeInfo and nodeBytes differ", g.Id())
			}
		}
		return nil
	})
}
