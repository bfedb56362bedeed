package io.quotapipeline.callback;

import java.time.Duration;
import java.time.Instant;

/**
 * When a repeated warning is logged: the first at once, then at most one line per interval, the line saying how many
 * were not logged meanwhile. Anyone who can write the decision topic can make a reader warn once per record, so no
 * such warning may reach the log once per record. The caller's clock decides; one thread only (the follower's).
 */
final class LogLimiter {
    private final Duration interval;
    private Instant lastLogged;
    private long notLogged;

    LogLimiter(Duration interval) {
        this.interval = interval;
    }

    /**
     * Whether the warning happening at {@code now} is logged: -1 when it is not (counted), else how many were not
     * logged since the last line. A clock that went back logs at once.
     */
    long admit(Instant now) {
        if (lastLogged != null && now.isBefore(lastLogged.plus(interval)) && !now.isBefore(lastLogged)) {
            notLogged++;
            return -1;
        }
        long skipped = notLogged;
        lastLogged = now;
        notLogged = 0;
        return skipped;
    }

    /** ", n of them not logged" for a count from {@link #admit}, or nothing. */
    static String unlogged(long count) {
        return count <= 0 ? "" : ", " + count + " of them not logged";
    }
}
