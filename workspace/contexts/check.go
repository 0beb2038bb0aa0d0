package contexts

import (
	"fmt"
	"slices"
	"sort"
)

// Check verifies the context records and their children index without
// repairing anything: every record decodes and names its key, every parent
// exists, and the index lists exactly each context's children. It returns
// one line per problem; an error means the check itself could not run.
func (s *Store) Check() ([]string, error) {
	keys, err := s.records.Keys()
	if err != nil {
		return nil, err
	}
	var probs []string
	byKey := map[string]Context{}
	children := map[string][]string{} // parent key → child names
	for _, k := range keys {
		c, found, err := s.loadKey(k)
		if err != nil {
			probs = append(probs, fmt.Sprintf("context %x: %v", k, err))
			continue
		}
		if found {
			byKey[k] = c
		}
	}
	for _, c := range byKey {
		if c.Parent == "" {
			continue
		}
		pk := Key(c.Parent)
		if _, ok := byKey[pk]; !ok {
			probs = append(probs, fmt.Sprintf("context %s: parent %s does not exist", c.Name, c.Parent))
		}
		children[pk] = append(children[pk], c.Name)
	}
	if len(byKey) == 0 {
		return probs, nil
	}
	if _, ready, err := s.indexReady(); err != nil {
		return append(probs, err.Error()), nil
	} else if !ready {
		return append(probs, "context children index missing (rebuilt by 'acyclicfs context list')"), nil
	}
	for pk, c := range byKey {
		want := children[pk]
		sort.Strings(want)
		got, err := s.Children(c.Name, len(want)+1)
		if err != nil {
			probs = append(probs, fmt.Sprintf("context %s: children index: %v", c.Name, err))
			continue
		}
		if !slices.Equal(got, want) {
			probs = append(probs, fmt.Sprintf("context %s: index lists children %q, records say %q", c.Name, got, want))
		}
	}
	sort.Strings(probs)
	return probs, nil
}
