// Package mysqllock is a distlock backend on MySQL and MariaDB named locks
// (GET_LOCK).
package mysqllock
