-- The width of the token column: 32 in schemas before tokens of up to 128
-- bytes, when Migrate widens it.
SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'distlock_leases' AND COLUMN_NAME = 'token'
