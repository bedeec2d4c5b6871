package pglock

// ListPageSQL is ListPage's statement, for a test of its plan.
var ListPageSQL = listPageSQL

// SlotKey is the first key of name's permit slots.
func (b *Backend) SlotKey(name string) int32 { return b.slotKey(name) }
