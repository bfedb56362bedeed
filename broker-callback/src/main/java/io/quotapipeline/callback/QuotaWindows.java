package io.quotapipeline.callback;

import java.util.concurrent.atomic.AtomicReference;

/**
 * Moves produce clients onto a new quota window after each cut of the produce limit.
 *
 * <p>Kafka charges a throttle against the bytes the client's quota sensor still holds (up to
 * {@code quota.window.num} x {@code quota.window.size.seconds}, 11 s by default): a cut from P to L on the same
 * sensor is answered with a throttle of about (P/L - 1) x 11 s, days at Strimzi's 1 byte/s, and the client stays
 * muted long after the release (bench/RESULTS.md, "Recovery after a produce throttle"). A sensor is named by its
 * metric tags, so a new epoch in the tags gives every client a new, empty window that is charged only for what it
 * sends after the cut. Raising the limit needs no new window. Thread-safe: Kafka asks on every request.
 */
final class QuotaWindows {
    /** The epoch of the window in force and the produce limit it was opened for. */
    private record Window(long epoch, double limit) {
    }

    private final AtomicReference<Window> current = new AtomicReference<>();

    /** The epoch for a produce limit answered now: the current one, or a new one when the limit went down. */
    long epoch(double produceLimit) {
        while (true) {
            Window seen = current.get();
            Window next;
            if (seen == null) {
                next = new Window(0, produceLimit);
            } else if (produceLimit < seen.limit()) {
                next = new Window(seen.epoch() + 1, produceLimit);
            } else if (produceLimit > seen.limit()) {
                next = new Window(seen.epoch(), produceLimit);
            } else {
                return seen.epoch();
            }
            if (current.compareAndSet(seen, next)) {
                return next.epoch();
            }
        }
    }
}
