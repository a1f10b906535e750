package main

// The one check CA's own code cannot express. CA 1.34.2 to 1.34.x read NodeGroupTemplateNodeInfo's
// `nodeBytes` and fall back to the legacy embedded `nodeInfo`; none of the three CA generations the
// harness is built from (1.34.1 reads only `nodeInfo`, 1.36.1 and master only `nodeBytes`) sees both.
// A server that filled the two with different Nodes would pass every generation and still mislead
// 1.34.2, so this check reads both fields with the v1.34.2 wire schema (built at run time from the
// golden protoc dump in ../shared/golden/externalgrpc, see schema.go) and requires identical bytes.

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
)

func (s *Suite) dualTemplateFields() {
	s.r.Check("NodeGroup.TemplateNodeInfo(nodeInfo == nodeBytes, v1.34.2 wire schema)", caRelease, func() error {
		schema, err := LoadSchema(s.cfg.golden, "v1.34.2")
		if err != nil {
			return err
		}
		conn, err := dialLikeCA(s.cfg.cloudConfig, nil)
		if err != nil {
			return err
		}
		defer conn.Close()
		for _, g := range sortedGroups(s.ca) {
			path, req, resp, err := schema.Method("NodeGroupTemplateNodeInfo")
			if err != nil {
				return err
			}
			setScalar(req, "id", g.Id())
			ctx, cancel := context.WithTimeout(context.Background(), s.ca.grpcTimeout)
			err = conn.Invoke(ctx, path, req, resp)
			cancel()
			if expectCode(err, codes.Unimplemented) == nil && !s.sim() {
				continue // a backend without templates
			}
			if err != nil {
				return err
			}
			legacy, current := getOpaque(resp, "nodeInfo"), getBytes(resp, "nodeBytes")
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
