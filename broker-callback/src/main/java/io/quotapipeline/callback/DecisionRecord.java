package io.quotapipeline.callback;

import com.fasterxml.jackson.core.JacksonException;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.util.JsonParserDelegate;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * The part of a decision-topic record the callback acts on (schemas/throttle_decision.schema.json).
 *
 * <p>Every reader (this callback and the Python reader, {@code enforce}, {@code tail} and the dashboard) takes a
 * record only when it has the same fields, checked the same way (docs/broker-side.md, "The contract for a callback";
 * tests/vectors holds both languages to it): {@code schema_version} (the JSON integer 1 or 2; version 2 only adds
 * fields), {@code cluster_id} (a string), {@code observed_at} and {@code decided_at} (RFC 3339 timestamps,
 * {@link Iso8601#instant}; both are checked
 * against the reader's clock, see {@link #refusal}), {@code throttle_factor} (a number from 0 to 1), {@code source},
 * {@code valid_until} (a timestamp, or absent or null: no expiry, which only a FALLBACK record has), {@code status}
 * (one of the poll statuses) and {@code active_brokers}, {@code active_log_dirs} and {@code violations} (JSON
 * integers, not negative). {@code stop} says what a factor of 0 refuses (StopAuthorizer); a malformed one never makes
 * the record invalid. Every other field is for people and is ignored, known or not, malformed or not.
 *
 * @param schemaVersion  1 or 2
 * @param observedAt     when the snapshot decided on was taken: the latest wins
 * @param throttleFactor the factor to multiply the produce quota by
 * @param source         OBSERVATION, RETAINED or FALLBACK
 * @param validUntil     when the decision stops holding, or null
 * @param clusterId      the value's cluster_id: names the cluster of a record without a key
 * @param decidedAt      when the pipeline decided: only checked against the reader's clock
 * @param stop           what a factor of 0 stops (the value's {@code stop}, read leniently: {@link StopScope#of})
 */
record DecisionRecord(int schemaVersion, Instant observedAt, double throttleFactor, Source source,
                      Instant validUntil, String clusterId, Instant decidedAt, StopScope stop) {

    /** Why a decision holds, as the publisher says. */
    enum Source { OBSERVATION, RETAINED, FALLBACK }

    static final Set<Long> SCHEMA_VERSIONS = Set.of(1L, 2L);
    /** The poll statuses the pipeline writes (quota_pipeline.core.model.Status). */
    static final Set<String> STATUSES = Set.of("SUCCESS", "DESCRIBE_CLUSTER_ERROR", "DESCRIBE_LOG_DIRS_ERROR",
            "TIMEOUT", "UNSUPPORTED_BROKER", "ERROR");
    /** The counts every record carries. */
    private static final List<String> COUNTS = List.of("active_brokers", "active_log_dirs", "violations");
    /** How much of a bad timestamp a log line shows: a timestamp is about 30 characters. */
    static final int SHOWN_TIME_CHARS = 40;
    /** How much of the JSON parser's own message a log line shows (it may quote the record's text). */
    static final int SHOWN_PARSER_CHARS = 200;

    /**
     * The broker's own Jackson (Kafka ships jackson-databind in libs/), read as Python's json.loads reads: NaN,
     * Infinity and -Infinity accepted, the last of duplicate keys wins, nothing after the value. The limits are
     * Python's: about 1000 levels of nesting (its recursion limit) and 4300 digits in a number (its int limit).
     */
    private static final ObjectMapper JSON = JsonMapper.builder(JsonFactory.builder()
                    .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
                    .streamReadConstraints(StreamReadConstraints.builder()
                            .maxNestingDepth(1000).maxNumberLength(4300).build())
                    .build())
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .build();
    /** Jackson also reads +Infinity, +INF and -INF; Python's json does not. */
    private static final Set<String> PYTHON_NON_NUMBERS = Set.of("NaN", "Infinity", "-Infinity");

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
        if (decidedAt.isAfter(latest)) {
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
        JsonNode raw = tree(value);
        if (!raw.isObject()) {
            throw new InvalidRecordException("the value is not a JSON object");
        }
        JsonNode version = raw.path("schema_version");
        if (!version.isIntegralNumber() || !version.canConvertToLong() || !SCHEMA_VERSIONS.contains(version.longValue())) {
            throw new InvalidRecordException("unknown schema_version " + describe(version));
        }
        JsonNode cluster = raw.path("cluster_id");
        if (!cluster.isTextual()) {
            throw new InvalidRecordException("cluster_id must be a string, got " + describe(cluster));
        }
        DecisionRecord record = new DecisionRecord(
                version.intValue(),
                time(raw, "observed_at", true),
                factor(raw.path("throttle_factor")),
                source(raw.path("source")),
                time(raw, "valid_until", false),
                cluster.textValue(),
                time(raw, "decided_at", true),
                StopScope.of(raw.path("stop")));
        JsonNode status = raw.path("status");
        if (!status.isTextual() || !STATUSES.contains(status.textValue())) {
            throw new InvalidRecordException("status must be one of " + String.join(", ", new TreeSet<>(STATUSES))
                    + ", got " + describe(status));
        }
        for (String field : COUNTS) {
            JsonNode count = raw.path(field);
            if (!count.isIntegralNumber() || count.bigIntegerValue().signum() < 0) {
                throw new InvalidRecordException(field + " must be a whole number, not negative, got "
                        + describe(count));
            }
        }
        return record;
    }

    /**
     * The value as a JSON tree; anything but one well-formed JSON text in UTF-8 without a byte order mark is refused
     * (never thrown further), as the Python readers' rules.record_json refuses it: no other encoding, so that a
     * record reads the same everywhere. The parser's message quotes the record's text: it is escaped and cut.
     */
    private static JsonNode tree(byte[] value) throws InvalidRecordException {
        String text;
        try {
            text = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(value)).toString();
        } catch (CharacterCodingException e) {
            throw new InvalidRecordException("the value is not UTF-8");
        }
        if (text.startsWith("\uFEFF")) {
            throw new InvalidRecordException("the value starts with a byte order mark: a record is UTF-8 without one");
        }
        try (JsonParser parser = new PythonNumbers(JSON.createParser(text))) {
            JsonNode tree = JSON.readTree(parser);
            return tree == null ? JSON.missingNode() : tree;
        } catch (JacksonException e) {
            throw new InvalidRecordException("the value is not JSON: " + shown(e.getOriginalMessage()));
        } catch (IOException e) {  // reading a String: only a JacksonException can happen
            throw new InvalidRecordException("the value is not JSON: " + shown(e.getMessage()));
        }
    }

    /** The parser's message for a log line, escaped and cut. */
    private static String shown(String message) {
        return Printable.visible(String.valueOf(message), SHOWN_PARSER_CHARS);
    }

    /** Refuses the non-numbers Python's json refuses (the tree cannot tell +Infinity from Infinity afterwards). */
    private static final class PythonNumbers extends JsonParserDelegate {
        PythonNumbers(JsonParser parser) {
            super(parser);
        }

        @Override
        public JsonToken nextToken() throws IOException {
            JsonToken token = super.nextToken();
            if (token == JsonToken.VALUE_NUMBER_FLOAT && delegate.isNaN() && !PYTHON_NON_NUMBERS.contains(getText())) {
                throw new JsonParseException(this, "not a JSON number: " + getText());
            }
            return token;
        }
    }

    private static double factor(JsonNode value) throws InvalidRecordException {
        if (!value.isNumber()) {
            throw new InvalidRecordException("throttle_factor must be a number, got " + describe(value));
        }
        double factor = value.doubleValue();
        if (!(factor >= 0.0 && factor <= 1.0)) {
            throw new InvalidRecordException("throttle_factor must be between 0 and 1, got " + describe(value));
        }
        return factor;
    }

    private static Source source(JsonNode value) throws InvalidRecordException {
        for (Source s : Source.values()) {
            if (value.isTextual() && s.name().equals(value.textValue())) {
                return s;
            }
        }
        throw new InvalidRecordException("source must be OBSERVATION, RETAINED or FALLBACK, got " + describe(value));
    }

    private static Instant time(JsonNode raw, String field, boolean required) throws InvalidRecordException {
        JsonNode value = raw.path(field);
        if ((value.isMissingNode() || value.isNull()) && !required) {
            return null;
        }
        if (!value.isTextual()) {
            throw new InvalidRecordException(field + " must be an RFC 3339 timestamp, got " + describe(value));
        }
        try {
            return Iso8601.instant(value.textValue());
        } catch (IllegalArgumentException e) {
            // Outside text: quoted, escaped and cut, so a record can neither forge log lines nor flood the log.
            throw new InvalidRecordException(field + " is not an RFC 3339 timestamp (" + e.getMessage() + "): "
                    + Printable.quote(value.textValue(), SHOWN_TIME_CHARS));
        }
    }

    /** A field's value for a log line, escaped and cut short: the record is anyone's text. */
    private static String describe(JsonNode value) {
        if (value.isMissingNode()) {
            return "nothing";
        }
        return Printable.quote(value.isTextual() ? value.textValue() : value.toString(), 80);
    }
}
