package main

// commandLine is what the CLI must know of its arguments before the
// command tree parses them: which store (to find its daemon), which
// command, and whether a flag is set (whether the command forwards, and
// starts a daemon). scanArgs is the one place argv is read by hand; the
// command tree (cobra) parses it for running it.
type commandLine struct {
	// store is --store's value (the last one wins, as for the flag
	// parser); "" when absent.
	store string
	// storeGiven: --store was given (an empty value is refused, not the
	// default store).
	storeGiven bool
	// words are the arguments that are not flags, up to "--": the
	// command's path (e.g. "context", "mount"), then its operands.
	words []string
	// flags are the flags given before "--", as written ("--foreground").
	flags map[string]bool
}

// scanArgs reads args as the CLI's pre-pass does. Of the flags, only
// --store is known to take a value: the command words come before other
// flags with values (as usage shows them).
func scanArgs(args []string) commandLine {
	c := commandLine{flags: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		s := args[i]
		switch {
		case s == "--":
			return c
		case s == "--store":
			c.storeGiven = true
			if i+1 < len(args) {
				c.store = args[i+1]
				i++
			}
		case len(s) >= 8 && s[:8] == "--store=":
			c.store, c.storeGiven = s[8:], true
		case len(s) > 0 && s[0] == '-':
			c.flags[s] = true
		default:
			c.words = append(c.words, s)
		}
	}
	return c
}

// word is the i-th command word ("" if there are fewer).
func (c commandLine) word(i int) string {
	if i < len(c.words) {
		return c.words[i]
	}
	return ""
}

// command is the command's name ("" for none).
func (c commandLine) command() string { return c.word(0) }
