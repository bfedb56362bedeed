package io.quotapipeline.callback;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.atomic.AtomicReference;

/**
 * How long the current stop has lasted. A stop that resumes within the longest mute of its release continues (its
 * age keeps counting), so a factor flapping around 0 cannot shorten the mutes; a later one starts anew. The release
 * is the first moment asked while not stopped: while stopped, clients may be muted for the whole max mute, so
 * silence is no release. Thread-safe: Kafka asks on every request; the state changes only at a stop and a release.
 */
final class StopClock {
    /** {@code released} null: the stop is in force. */
    private record State(Instant started, Instant released) {
    }

    private final Duration continuation;
    private final AtomicReference<State> state = new AtomicReference<>();

    StopClock(Duration continuation) {
        this.continuation = continuation;
    }

    /** The stop's age in seconds at {@code now}; {@code stopped} says whether production is stopped at now. */
    double age(Instant now, boolean stopped) {
        while (true) {
            State seen = state.get();
            State next;
            if (seen == null) {
                if (!stopped) {
                    return 0.0;
                }
                next = new State(now, null);
            } else if (!stopped) {
                if (seen.released() != null) {
                    return ended(seen.released(), now) ? 0.0 : seconds(seen.started(), now);
                }
                next = new State(seen.started(), now);
            } else if (seen.released() != null) {
                next = new State(ended(seen.released(), now) ? now : seen.started(), null);
            } else {
                return seconds(seen.started(), now);
            }
            if (state.compareAndSet(seen, next)) {
                return next.released() != null && ended(next.released(), now) ? 0.0 : seconds(next.started(), now);
            }
        }
    }

    private boolean ended(Instant released, Instant now) {
        return Duration.between(released, now).compareTo(continuation) > 0;
    }

    private static double seconds(Instant from, Instant to) {
        return Math.max(0.0, Duration.between(from, to).toNanos() / 1e9);
    }
}
