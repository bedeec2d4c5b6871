-- Run by Migrate only where an earlier version drew fences from the sequence
-- distlock_fence (a MariaDB sequence): the floor starts above every fence it
-- handed out, cached ones included, since keys released back then have no
-- row left to tell.
UPDATE distlock_fence_floor
SET n = GREATEST(n, (SELECT next_not_cached_value FROM distlock_fence))
WHERE id = 1
