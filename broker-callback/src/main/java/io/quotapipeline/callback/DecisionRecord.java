package io.quotapipeline.callback;

import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.Set;

/**
 * The part of a decision-topic record the callback acts on (schemas/throttle_decision.schema.json).
 *
 * <p>Five fields decide: {@code schema_version} (1 or 2; version 2 only adds fields), {@code observed_at},
 * {@code throttle_factor} (a number from 0 to 1), {@code source} and {@code valid_until} (absent or null means
 * no expiry, which only a FALLBACK record has). {@code cluster_id} names the cluster when a record has no key.
 * {@code decided_at}, when it is a timestamp, is only checked against the reader's clock (see {@link #refusal}).
 * Every other field is for people and is ignored, known or not.
 *
 * @param schemaVersion  1 or 2
 * @param observedAt     when the snapshot decided on was taken: the latest wins
 * @param throttleFactor the factor to multiply the produce quota by
 * @param source         OBSERVATION, RETAINED or FALLBACK
 * @param validUntil     when the decision stops holding, or null
 * @param clusterId      the value's cluster_id when it is a string, else null
 * @param decidedAt      the value's decided_at when it is a timestamp, else null
 */
record DecisionRecord(int schemaVersion, Instant observedAt, double throttleFactor, Source source,
                      Instant validUntil, String clusterId, Instant decidedAt) {

    /** Why a decision holds, as the publisher says. */
    enum Source { OBSERVATION, RETAINED, FALLBACK }

    static final Set<Long> SCHEMA_VERSIONS = Set.of(1L, 2L);

    /** A record the callback cannot use: it is counted and skipped. */
    static final class InvalidRecordException extends Exception {
        private static final long serialVersionUID = 1L;

        InvalidRecordException(String message) {
            super(message);
        }
    }

    /** True when the pipeline itself has no valid decision: the callback applies its own fallback. */
    boolean isFallback() {
        return source == Source.FALLBACK || validUntil == null;
    }

    /**
     * Why a reader whose clock reads {@code now} must not take this record, or null when it may: its observed_at
     * or decided_at is further ahead of that clock than {@code skew}. Only the pipeline may change the factor:
     * a record from the future would otherwise outrank every genuine one ("the latest observed_at wins").
     */
    String refusal(Instant now, Duration skew) {
        Instant latest = now.plus(skew);
        if (observedAt.isAfter(latest)) {
            return ahead("observed_at", observedAt, now, skew);
        }
        if (decidedAt != null && decidedAt.isAfter(latest)) {
            return ahead("decided_at", decidedAt, now, skew);
        }
        return null;
    }

    private static String ahead(String field, Instant at, Instant now, Duration skew) {
        return field + " " + at + " is " + Duration.between(now, at).toSeconds() + " s ahead of this reader's clock ("
                + now + "); " + CallbackConfig.MAX_CLOCK_SKEW + " allows " + skew;
    }

    /**
     * Until when this record is honoured: its valid_until, but never beyond observed_at + the reader's own
     * validity + skew, so a record cannot outlive a stopped pipeline by more than a genuine one would. Null for
     * a record without valid_until.
     */
    Instant honouredUntil(Duration validity, Duration skew) {
        if (validUntil == null) {
            return null;
        }
        Instant limit = observedAt.plus(validity).plus(skew);
        return validUntil.isAfter(limit) ? limit : validUntil;
    }

    static DecisionRecord parse(byte[] value) throws InvalidRecordException {
        Object parsed;
        try {
            parsed = Json.parse(value);
        } catch (Json.ParseException e) {
            throw new InvalidRecordException(e.getMessage());
        }
        if (!(parsed instanceof Map)) {
            throw new InvalidRecordException("the value is not a JSON object");
        }
        Map<?, ?> raw = (Map<?, ?>) parsed;
        Object version = raw.get("schema_version");
        if (!(version instanceof Long) || !SCHEMA_VERSIONS.contains(version)) {
            throw new InvalidRecordException("unknown schema_version " + describe(version));
        }
        return new DecisionRecord(
                ((Long) version).intValue(),
                time(raw, "observed_at", true),
                factor(raw.get("throttle_factor")),
                source(raw.get("source")),
                time(raw, "valid_until", false),
                raw.get("cluster_id") instanceof String ? (String) raw.get("cluster_id") : null,
                optionalTime(raw.get("decided_at")));
    }

    /** decided_at is for people; the callback reads it only to refuse one from the future, so a bad one is no error. */
    private static Instant optionalTime(Object value) {
        if (!(value instanceof String)) {
            return null;
        }
        try {
            return Iso8601.instant((String) value);
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    private static double factor(Object value) throws InvalidRecordException {
        if (!(value instanceof Number)) {
            throw new InvalidRecordException("throttle_factor must be a number, got " + describe(value));
        }
        double factor = ((Number) value).doubleValue();
        if (!(factor >= 0.0 && factor <= 1.0)) {
            throw new InvalidRecordException("throttle_factor must be between 0 and 1, got " + value);
        }
        return factor;
    }

    private static Source source(Object value) throws InvalidRecordException {
        for (Source s : Source.values()) {
            if (s.name().equals(value)) {
                return s;
            }
        }
        throw new InvalidRecordException("source must be OBSERVATION, RETAINED or FALLBACK, got " + describe(value));
    }

    private static Instant time(Map<?, ?> raw, String field, boolean required) throws InvalidRecordException {
        Object value = raw.containsKey(field) ? raw.get(field) : Json.NULL;
        if (value == Json.NULL && !required) {
            return null;
        }
        if (!(value instanceof String)) {
            throw new InvalidRecordException(field + " must be an ISO-8601 timestamp, got " + describe(value));
        }
        try {
            return Iso8601.instant((String) value);
        } catch (IllegalArgumentException e) {
            throw new InvalidRecordException(field + " is " + e.getMessage());
        }
    }

    private static String describe(Object value) {
        return value instanceof String ? "\"" + value + "\"" : String.valueOf(value);
    }
}
