-- Widens the token column of an earlier schema to the longest token.
ALTER TABLE distlock_leases MODIFY token VARCHAR(128) NOT NULL
