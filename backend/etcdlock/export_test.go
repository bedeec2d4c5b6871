package etcdlock

// Escape exposes the key mapping to the tests.
var Escape = escape

// Unescape exposes the reverse mapping to the tests.
var Unescape = unescape
