package io.quotapipeline.callback;

import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.atomic.AtomicLong;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The latest decision of one cluster, and the factor it means at a given instant.
 *
 * <p>One thread applies records (the follower); any thread may ask for an answer: the held record is one
 * immutable value behind a volatile field, so answering never blocks.
 *
 * <p>Only the pipeline may change the factor: a record whose observed_at or decided_at is further ahead of this
 * holder's clock than the skew allowance is refused (counted, logged, never held), and a held record's
 * valid_until is honoured at most until observed_at + validity + skew (docs/broker-side.md).
 */
final class DecisionHolder {
    private static final Logger log = LoggerFactory.getLogger(DecisionHolder.class);
    /** At most one refusal line per this long (the count says how many were refused meanwhile). */
    static final Duration REFUSAL_LOG_INTERVAL = Duration.ofSeconds(10);

    /** What became of one record. */
    enum Outcome { APPLIED, OLDER, SKIPPED, REFUSED, TOMBSTONE, OTHER_CLUSTER }

    /** The last refused record: its key, where it is on the topic (" at topic/partition@offset") and why. */
    record Refusal(String key, String where, String reason, Instant at) {
    }

    private final String cluster;
    private final Duration validity;
    private final double fallback;
    private final Duration skew;
    private final Clock clock;
    private final Instant startedAt;
    private volatile DecisionRecord held;
    private volatile Refusal lastRefusal;
    private final AtomicLong applied = new AtomicLong();
    private final AtomicLong older = new AtomicLong();
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong tombstones = new AtomicLong();
    private Instant lastRefusalLogged;  // follower thread only
    private long refusalsNotLogged;
    private boolean cappedLogged;

    DecisionHolder(String cluster, Duration validity, double fallback, Duration skew, Clock clock) {
        this.cluster = cluster;
        this.validity = validity;
        this.fallback = fallback;
        this.skew = skew;
        this.clock = clock;
        this.startedAt = clock.instant();
    }

    /** Takes one topic record; never throws on bad input (it is counted and skipped). */
    Outcome apply(byte[] key, byte[] value, String where) {
        String recordKey = key == null ? null : new String(key, StandardCharsets.UTF_8);
        if (value == null) {
            if (recordKey == null) {
                return Outcome.OTHER_CLUSTER;
            }
            // A tombstone has no date, and anyone who can write the topic can write one: it is read as absence, so
            // the decision in force stays until its own valid_until and a tombstone never shortens a stop.
            tombstones.incrementAndGet();
            return Outcome.TOMBSTONE;
        }
        DecisionRecord record;
        try {
            record = DecisionRecord.parse(value);
        } catch (DecisionRecord.InvalidRecordException e) {
            skipped.incrementAndGet();
            log.warn("skipped a record{} (key {}): {}", where, Printable.quote(recordKey), e.getMessage());
            return Outcome.SKIPPED;
        }
        // Like the Python reader: a record without a key (or with an empty one) names its cluster in cluster_id.
        String recordCluster = recordKey != null && !recordKey.isEmpty() ? recordKey : record.clusterId();
        if (!cluster.equals(recordCluster)) {
            return Outcome.OTHER_CLUSTER;
        }
        Instant now = clock.instant();
        String refusal = record.refusal(now, skew);
        if (refusal != null) {
            refuse(recordKey, where, refusal, now);
            return Outcome.REFUSED;  // never replaces the decision in force
        }
        DecisionRecord current = held;
        if (current != null && record.observedAt().isBefore(current.observedAt())) {
            older.incrementAndGet();  // a late or replayed record must not undo a newer decision
            return Outcome.OLDER;
        }
        held = record;
        applied.incrementAndGet();
        noteCap(record, where);
        if (current == null || current.throttleFactor() != record.throttleFactor()
                || current.isFallback() != record.isFallback()) {
            log.info("decision of {} observed at {}: throttle factor {} ({}, valid until {})", cluster,
                    record.observedAt(), record.throttleFactor(), record.source(), record.validUntil());
        }
        return Outcome.APPLIED;
    }

    /** The factor a broker of this cluster applies at {@code now}. */
    Answer answer(Instant now) {
        DecisionRecord record = held;
        if (record == null) {
            // Strimzi's initial factor, and the pipeline's own initial decision: 1.0 for one validity.
            if (now.isAfter(startedAt.plus(validity))) {
                return new Answer(fallback, Answer.Basis.FALLBACK, "no decision within the validity since start", null);
            }
            return new Answer(1.0, Answer.Basis.INITIAL, "no decision yet", null);
        }
        if (record.isFallback()) {
            return new Answer(fallback, Answer.Basis.FALLBACK, "the publisher itself has no valid decision", record);
        }
        Instant until = record.honouredUntil(validity, skew);
        if (now.isAfter(until)) {
            return new Answer(fallback, Answer.Basis.FALLBACK, "the latest decision expired at " + until
                    + (until.equals(record.validUntil()) ? "" : " (its valid_until " + record.validUntil()
                    + " is beyond observed_at + validity + skew)"), record);
        }
        return new Answer(record.throttleFactor(), Answer.Basis.RECORD, "valid decision", record);
    }

    /** Counts a refusal and logs it: the first at once, then at most one line per REFUSAL_LOG_INTERVAL. */
    private void refuse(String key, String where, String reason, Instant now) {
        long total = refused.incrementAndGet();
        lastRefusal = new Refusal(key, where, reason, now);
        if (lastRefusalLogged != null && now.isBefore(lastRefusalLogged.plus(REFUSAL_LOG_INTERVAL))
                && !now.isBefore(lastRefusalLogged)) {
            refusalsNotLogged++;
            return;
        }
        String unlogged = refusalsNotLogged == 0 ? "" : ", " + refusalsNotLogged + " of them not logged";
        log.warn("refused a decision record{} (key {}): {}; the decision in force is kept ({} refused so far{})",
                where, Printable.quote(key), reason, total, unlogged);
        lastRefusalLogged = now;
        refusalsNotLogged = 0;
    }

    /** Says once (until a record within the limit arrives) that a valid_until is honoured for less time. */
    private void noteCap(DecisionRecord record, String where) {
        Instant until = record.honouredUntil(validity, skew);
        boolean capped = until != null && !until.equals(record.validUntil());
        if (capped && !cappedLogged) {
            log.warn("the decision{} has valid_until {}, beyond observed_at {} + {} {} + {} {}: it is honoured "
                            + "until {} (give the pipeline and the brokers the same validity)", where,
                    record.validUntil(), record.observedAt(), CallbackConfig.VALIDITY, validity,
                    CallbackConfig.MAX_CLOCK_SKEW, skew, until);
        }
        cappedLogged = capped;
    }

    String cluster() {
        return cluster;
    }

    long refused() {
        return refused.get();
    }

    /** The last refused record, or null. */
    Refusal lastRefusal() {
        return lastRefusal;
    }

    long applied() {
        return applied.get();
    }

    long older() {
        return older.get();
    }

    long skipped() {
        return skipped.get();
    }

    long tombstones() {
        return tombstones.get();
    }
}
