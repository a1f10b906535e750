package main

// Cache keys that do not depend on the order of map entries.
//
// Why: Go's protobuf encoder writes map entries in random order (map iteration order), so
// cluster-autoscaler's NodeGroupForNode request for the same node, whose labels and annotations are
// maps, has different bytes on nearly every call; keyed by raw bytes, the cache missed almost always
// (measured with CA 1.36.1 at 1,000 nodes: 113 us of server CPU per call against 62 us for the canned
// Go server). Python names the map fields of each cacheable request (field-number paths, from the
// descriptors); the key sorts each map's entries. It is exact: two requests get the same key only
// when their fields are the same in the same order and each map holds the same entries, and a map
// with a repeated key (where order decides which value wins) is not canonicalised at all.

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// mapPaths: for one request type, which field-number paths are map fields, and which paths lead to
// them (messages to descend into).
type mapPaths struct {
	maps map[string]bool
	via  map[string]bool
}

func pathKey(path []int) string {
	b := make([]byte, 0, len(path)*2)
	for _, n := range path {
		b = protowire.AppendVarint(b, uint64(n))
	}
	return string(b)
}

func newMapPaths(paths [][]int) *mapPaths {
	if len(paths) == 0 {
		return nil
	}
	m := &mapPaths{maps: map[string]bool{}, via: map[string]bool{}}
	for _, p := range paths {
		m.maps[pathKey(p)] = true
		for i := 1; i < len(p); i++ {
			m.via[pathKey(p[:i])] = true
		}
	}
	return m
}

// key returns the canonical form of msg, or msg itself when it cannot be canonicalised.
func (m *mapPaths) key(msg []byte) []byte {
	if m == nil {
		return msg
	}
	out, ok := m.canon(msg, nil)
	if !ok {
		return msg
	}
	return out
}

func (m *mapPaths) canon(msg []byte, path []int) ([]byte, bool) {
	var out []byte
	var entries map[protowire.Number][][]byte
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, false
		}
		size := protowire.ConsumeFieldValue(num, typ, msg[n:])
		if size < 0 {
			return nil, false
		}
		field := msg[:n+size]
		msg = msg[n+size:]
		if typ != protowire.BytesType {
			out = append(out, field...)
			continue
		}
		here := pathKey(append(slices.Clip(path), int(num)))
		value, _ := protowire.ConsumeBytes(field[n:])
		switch {
		case m.maps[here]:
			if entries == nil {
				entries = map[protowire.Number][][]byte{}
			}
			entries[num] = append(entries[num], value)
		case m.via[here]:
			inner, ok := m.canon(value, append(slices.Clip(path), int(num)))
			if !ok {
				return nil, false
			}
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, inner)
		default:
			out = append(out, field...)
		}
	}
	nums := make([]protowire.Number, 0, len(entries))
	for num := range entries {
		nums = append(nums, num)
	}
	slices.Sort(nums)
	for _, num := range nums {
		list := entries[num]
		if !uniqueKeys(list) {
			return nil, false
		}
		slices.SortFunc(list, bytes.Compare)
		for _, e := range list {
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, e)
		}
	}
	return out, true
}

// uniqueKeys: no two map entries share a key (field 1 of the entry message); entries that do not
// parse count as a conflict, so such a request is keyed by its raw bytes.
func uniqueKeys(list [][]byte) bool {
	seen := make(map[string]bool, len(list))
	for _, e := range list {
		k, ok := entryKey(e)
		if !ok || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}

// entryKey: the decoded key of a map entry. An entry without a key, or with two, is refused: its key
// would depend on a default or on which occurrence wins.
func entryKey(entry []byte) (string, bool) {
	key, found := "", false
	for len(entry) > 0 {
		num, typ, n := protowire.ConsumeTag(entry)
		if n < 0 {
			return "", false
		}
		size := protowire.ConsumeFieldValue(num, typ, entry[n:])
		if size < 0 {
			return "", false
		}
		if num == 1 {
			if found {
				return "", false
			}
			switch typ {
			case protowire.BytesType:
				v, _ := protowire.ConsumeBytes(entry[n:])
				key = "s" + string(v)
			case protowire.VarintType:
				v, _ := protowire.ConsumeVarint(entry[n:])
				key = "v" + string(protowire.AppendVarint(nil, v))
			default:
				return "", false
			}
			found = true
		}
		entry = entry[n+size:]
	}
	return key, found
}
