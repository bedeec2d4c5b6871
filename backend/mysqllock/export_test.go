package mysqllock

// ListPageSQL is ListPage's statement, for a test of its plan.
var ListPageSQL = listPageSQL
