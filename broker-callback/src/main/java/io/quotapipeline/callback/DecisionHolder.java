package io.quotapipeline.callback;

import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The latest decision of one cluster, and the factor it means at a given instant.
 *
 * <p>One thread applies records (the follower); any thread may ask for an answer: the held record is one
 * immutable value behind a volatile field, so answering never blocks.
 *
 * <p>Only the pipeline may change the factor: with signing keys configured a record that is not signed with one of
 * them is refused, and so is a record whose observed_at or decided_at is further ahead of this holder's clock than
 * the skew allowance, and so is a record older than one read before it on the topic (the pipeline writes a
 * cluster's records in order: this one was written again, a replay), all counted, logged and never held. A record
 * older than the one held is never taken, and a held record's valid_until is honoured at most until observed_at +
 * validity + skew (docs/broker-side.md, docs/security.md).
 */
final class DecisionHolder {
    private static final Logger log = LoggerFactory.getLogger(DecisionHolder.class);
    /** At most one refusal line, and one skipped-record line, per this long (the count says how many meanwhile). */
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
    private final DecisionSignature signature;
    private final Instant startedAt;
    private volatile DecisionRecord held;
    private Instant newestRead;  // follower thread only: the newest observed_at taken or kept from the topic
    private volatile Refusal lastRefusal;
    private final AtomicLong applied = new AtomicLong();
    private final AtomicLong older = new AtomicLong();
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong refused = new AtomicLong();
    private final AtomicLong tombstones = new AtomicLong();
    private final LogLimiter refusalLines = new LogLimiter(REFUSAL_LOG_INTERVAL);  // follower thread only
    private final LogLimiter skipLines = new LogLimiter(REFUSAL_LOG_INTERVAL);
    private boolean cappedLogged;
    private Consumer<String> warnings = log::warn;

    DecisionHolder(String cluster, Duration validity, double fallback, Duration skew, Clock clock) {
        this(cluster, validity, fallback, skew, clock, DecisionSignature.NONE);
    }

    DecisionHolder(String cluster, Duration validity, double fallback, Duration skew, Clock clock,
                   DecisionSignature signature) {
        this.cluster = cluster;
        this.validity = validity;
        this.fallback = fallback;
        this.skew = skew;
        this.clock = clock;
        this.signature = signature;
        this.startedAt = clock.instant();
    }

    /** Takes one unsigned topic record; never throws on bad input (it is counted and skipped). */
    Outcome apply(byte[] key, byte[] value, String where) {
        return apply(key, value, null, where);
    }

    /**
     * Takes one topic record; never throws on bad input (it is counted and skipped, or refused).
     *
     * @param signature the value of the record's {@value DecisionSignature#HEADER} header, or null
     */
    Outcome apply(byte[] key, byte[] value, byte[] signature, String where) {
        return take(key, value, signature, where, true);
    }

    /**
     * Takes the record this broker stored before it restarted (LastDecisionFile), under the same rules but for the
     * order on the topic: the topic's records that come before it are read after it.
     */
    Outcome restore(byte[] key, byte[] value, byte[] signature, String where) {
        return take(key, value, signature, where, false);
    }

    private Outcome take(byte[] key, byte[] value, byte[] signature, String where, boolean fromTopic) {
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
            long total = skipped.incrementAndGet();
            long unlogged = skipLines.admit(clock.instant());
            if (unlogged >= 0) {
                warn("skipped a record" + where + " (key " + Printable.quote(recordKey) + "): "
                        + e.getMessage() + " (" + total + " skipped so far" + LogLimiter.unlogged(unlogged) + ")");
            }
            return Outcome.SKIPPED;
        }
        // Like the Python reader: a record without a key (or with an empty one) names its cluster in cluster_id.
        String recordCluster = recordKey != null && !recordKey.isEmpty() ? recordKey : record.clusterId();
        if (!cluster.equals(recordCluster)) {
            return Outcome.OTHER_CLUSTER;
        }
        Instant now = clock.instant();
        String refusal = this.signature.refusal(key, value, signature);
        if (refusal == null) {
            refusal = record.refusal(now, skew);
        }
        if (refusal != null) {
            refuse(recordKey, where, refusal, now);
            return Outcome.REFUSED;  // never replaces the decision in force
        }
        if (fromTopic && newestRead != null && record.observedAt().isBefore(newestRead)) {
            refuse(recordKey, where, "observed_at " + record.observedAt() + " is older than that of a record read "
                    + "before it (" + newestRead + "): a record written again, since the pipeline writes a cluster's "
                    + "records in order", now);
            return Outcome.REFUSED;
        }
        if (fromTopic) {
            newestRead = record.observedAt();
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
        long unlogged = refusalLines.admit(now);
        if (unlogged >= 0) {
            warn("refused a decision record" + where + " (key " + Printable.quote(key) + "): " + reason
                    + "; the decision in force is kept (" + total + " refused so far" + LogLimiter.unlogged(unlogged)
                    + ")");
        }
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

    /**
     * Sends one skipped or refused line to the log. Its parts quote and cut the record's text already; the whole line
     * is escaped once more (Printable.visible leaves an escaped text as it is), so that no part a record wrote can
     * reach the log with a control, bidirectional or line-separator character, as the Python readers' log formatter
     * (core.display.VisibleFormatter) does with every line.
     */
    private void warn(String line) {
        warnings.accept(Printable.visible(line));
    }

    /** Where the skipped and refused lines go (the log; a test's list). */
    void warnTo(Consumer<String> sink) {
        warnings = sink;
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
