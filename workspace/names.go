package workspace

import (
	"fmt"
	"strconv"
)

// MaxNameLen is the longest workspace name in bytes.
const MaxNameLen = 128

// ValidateName checks a workspace name against SPEC.md's rule.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrInvalidName, len(name), MaxNameLen)
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("%w: %s must not start with %q", ErrInvalidName, strconv.Quote(name), name[0])
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %s contains %q (allowed: letters, digits, '.', '_', '-')", ErrInvalidName, strconv.Quote(name), c)
		}
	}
	return nil
}
