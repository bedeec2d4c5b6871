package distlock

// WaitersInLine returns how many of c's waiters are in key's line: tests use
// it to know a waiter has joined before they go on.
func WaitersInLine(c *Client, key string) int {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	if ln := c.lines.byKey[key]; ln != nil {
		return len(ln.turns)
	}
	return 0
}
