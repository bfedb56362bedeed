package io.quotapipeline.callback;

import java.nio.charset.StandardCharsets;
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
 */
final class DecisionHolder {
    private static final Logger log = LoggerFactory.getLogger(DecisionHolder.class);

    /** What became of one record. */
    enum Outcome { APPLIED, OLDER, SKIPPED, TOMBSTONE, OTHER_CLUSTER }

    private final String cluster;
    private final Duration validity;
    private final double fallback;
    private final Instant startedAt;
    private volatile DecisionRecord held;
    private final AtomicLong applied = new AtomicLong();
    private final AtomicLong older = new AtomicLong();
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong tombstones = new AtomicLong();

    DecisionHolder(String cluster, Duration validity, double fallback, Instant startedAt) {
        this.cluster = cluster;
        this.validity = validity;
        this.fallback = fallback;
        this.startedAt = startedAt;
    }

    /** Takes one topic record; never throws on bad input (it is counted and skipped). */
    Outcome apply(byte[] key, byte[] value, String where) {
        String recordKey = key == null ? null : new String(key, StandardCharsets.UTF_8);
        if (value == null) {
            if (recordKey == null) {
                return Outcome.OTHER_CLUSTER;
            }
            tombstones.incrementAndGet();
            if (recordKey.equals(cluster) && held != null) {
                held = null;
                log.info("a tombstone{} retired the decision of {}", where, cluster);
            }
            return Outcome.TOMBSTONE;
        }
        DecisionRecord record;
        try {
            record = DecisionRecord.parse(value);
        } catch (DecisionRecord.InvalidRecordException e) {
            skipped.incrementAndGet();
            log.warn("skipped a record{} (key {}): {}", where, recordKey, e.getMessage());
            return Outcome.SKIPPED;
        }
        // Like the Python reader: a record without a key (or with an empty one) names its cluster in cluster_id.
        String recordCluster = recordKey != null && !recordKey.isEmpty() ? recordKey : record.clusterId();
        if (!cluster.equals(recordCluster)) {
            return Outcome.OTHER_CLUSTER;
        }
        DecisionRecord current = held;
        if (current != null && record.observedAt().isBefore(current.observedAt())) {
            older.incrementAndGet();  // a late or replayed record must not undo a newer decision
            return Outcome.OLDER;
        }
        held = record;
        applied.incrementAndGet();
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
        if (now.isAfter(record.validUntil())) {
            return new Answer(fallback, Answer.Basis.FALLBACK,
                    "the latest decision expired at " + record.validUntil(), record);
        }
        return new Answer(record.throttleFactor(), Answer.Basis.RECORD, "valid decision", record);
    }

    String cluster() {
        return cluster;
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
