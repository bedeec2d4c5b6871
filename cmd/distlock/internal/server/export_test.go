package server

// SessionHandle exposes the public handle of a session's secret, so that a
// test can make a session as an earlier release stored it.
var SessionHandle = sessionHandle
