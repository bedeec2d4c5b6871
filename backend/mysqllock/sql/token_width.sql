-- The width of the token column: 64 in schemas before tokens of up to 128
-- bytes, when Migrate widens it.
SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'distlock_mysql_locks' AND COLUMN_NAME = 'token'
