package ledger

import "time"

// ExpireAt runs the index's sweep as if the clock read now.
func (x *Index) ExpireAt(now time.Time) { x.expire(now) }
