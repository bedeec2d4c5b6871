-- name. Runs on the pinned connection: 1 if the session held the lock and
-- freed it. The row stays: it keeps the fence, Inspect ignores it once its
-- session no longer holds the lock, and Cleanup deletes it once stale.
SELECT RELEASE_LOCK(?)
