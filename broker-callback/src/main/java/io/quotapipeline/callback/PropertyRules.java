package io.quotapipeline.callback;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * How each property value is read, with the rules and messages of the Python config (quota_pipeline config),
 * so one properties file is accepted or refused the same way by the pipeline and by the broker.
 * Every method takes the value already stripped and throws IllegalArgumentException with the message that
 * follows the property name.
 */
final class PropertyRules {
    /** Python's float() syntax without digit underscores; "nan" is refused like Python's config does. */
    private static final Pattern DECIMAL = Pattern.compile("[+-]?(\\d+\\.?\\d*|\\.\\d+)([eE][+-]?\\d+)?");
    private static final Pattern INFINITE = Pattern.compile("[+-]?(inf|infinity)", Pattern.CASE_INSENSITIVE);
    private static final Pattern TOPIC = Pattern.compile("[A-Za-z0-9._-]{1,249}");
    static final String USER_PREFIX = "User:";

    private PropertyRules() {
    }

    /** A number no smaller than {@code minimum} ("must be at least 0.0"). */
    static double atLeast(String raw, double minimum) {
        double value = number(raw);
        if (value < minimum) {
            throw new IllegalArgumentException("must be at least " + pythonRepr(minimum));
        }
        return value;
    }

    /** A number within [minimum, maximum] ("must be between 0.0 and 1.0"). */
    static double between(String raw, double minimum, double maximum) {
        double value = number(raw);
        if (!(value >= minimum && value <= maximum)) {
            throw new IllegalArgumentException(
                    "must be between " + pythonRepr(minimum) + " and " + pythonRepr(maximum));
        }
        return value;
    }

    private static double number(String raw) {
        if (DECIMAL.matcher(raw).matches()) {
            return Double.parseDouble(raw);
        }
        if (INFINITE.matcher(raw).matches()) {
            return raw.startsWith("-") ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
        }
        throw new IllegalArgumentException("must be a number");
    }

    /** A number as people write it: 11 for 11.0, 11.5 otherwise (Python's {@code f"{x:g}"} for these values). */
    static String plain(double value) {
        return value == Math.rint(value) && Math.abs(value) < 1e15 ? Long.toString((long) value) : Double.toString(value);
    }

    /** Python prints 1.0 as "1.0" and 1e-05 as "1e-05"; the limits used here are all plain decimals. */
    private static String pythonRepr(double value) {
        return Double.toString(value);
    }

    /**
     * Strimzi's excluded principal list: ';'-separated {@code User:name} entries; returns the names.
     */
    static Set<String> principalNames(String raw) {
        List<String> entries = split(raw, ";");
        List<String> bad = new ArrayList<>();
        Set<String> names = new LinkedHashSet<>();
        for (String entry : entries) {
            if (!entry.startsWith(USER_PREFIX) || entry.length() == USER_PREFIX.length()) {
                bad.add(entry);
            } else {
                names.add(entry.substring(USER_PREFIX.length()));
            }
        }
        if (!bad.isEmpty()) {
            throw new IllegalArgumentException("each ';'-separated principal must be written User:<name>; fix "
                    + String.join(", ", bad));
        }
        return names;
    }

    /** A ','-separated list of client ids; blanks are dropped. */
    static Set<String> clientIds(String raw) {
        return new LinkedHashSet<>(split(raw, ","));
    }

    /** A ','-separated host:port list with at least one entry, returned joined without blanks. */
    static String hostList(String raw) {
        List<String> servers = split(raw, ",");
        if (servers.isEmpty()) {
            throw new IllegalArgumentException("must list at least one host:port");
        }
        return String.join(",", servers);
    }

    /** A boolean property: "true" or "false" in any case, as Kafka's ConfigDef reads one. */
    static boolean bool(String raw) {
        if (!"true".equalsIgnoreCase(raw) && !"false".equalsIgnoreCase(raw)) {
            throw new IllegalArgumentException("must be true or false");
        }
        return "true".equalsIgnoreCase(raw);
    }

    /** quota.pipeline.stop.scope: "topics" or "cluster". */
    static String stopScope(String raw) {
        if (!"topics".equals(raw) && !"cluster".equals(raw)) {
            throw new IllegalArgumentException("must be one of topics, cluster");
        }
        return raw;
    }

    static String topic(String raw) {
        if (!TOPIC.matcher(raw).matches()) {
            throw new IllegalArgumentException("not a valid Kafka topic name (letters, digits, . _ -)");
        }
        return raw;
    }

    private static List<String> split(String raw, String separator) {
        List<String> parts = new ArrayList<>();
        for (String part : raw.split(Pattern.quote(separator), -1)) {
            String trimmed = part.strip();
            if (!trimmed.isEmpty()) {
                parts.add(trimmed);
            }
        }
        return parts;
    }

    /** True for keys whose values must never be printed or logged (the Python config's rule). */
    static boolean isSecret(String key) {
        String k = key.toLowerCase(Locale.ROOT);
        return k.contains("password") || k.contains("secret") || k.contains("token") || k.contains("credential")
                || k.contains("sasl.jaas.config") || k.equals("key") || k.endsWith(".key") || k.endsWith("_key")
                || k.endsWith(".keys");
    }
}
