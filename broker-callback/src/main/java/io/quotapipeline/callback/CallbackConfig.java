package io.quotapipeline.callback;

import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.server.quota.ClientQuotaType;

import static org.apache.kafka.common.config.ConfigDef.Importance.HIGH;
import static org.apache.kafka.common.config.ConfigDef.Importance.LOW;
import static org.apache.kafka.common.config.ConfigDef.Importance.MEDIUM;
import static org.apache.kafka.common.config.ConfigDef.Type.STRING;

/**
 * The callback's properties: Strimzi's names, defaults and validation (with the Python side's messages), plus
 * where to read the decisions. Every other property of the broker file (the pipeline's limits and intervals,
 * the broker's own settings) is ignored.
 */
final class CallbackConfig {
    static final String P = "client.quota.callback.static.";
    static final String Q = "quota.pipeline.";
    static final String PRODUCE = P + "produce";
    static final String FETCH = P + "fetch";
    static final String REQUEST = P + "request";
    static final String EXCLUDED_PRINCIPALS = P + "excluded.principal.name.list";
    static final String FALLBACK = P + "throttle.factor.fallback";
    static final String VALIDITY = P + "throttle.factor.validity.duration";
    static final String ADMIN_PREFIX = P + "kafka.admin.";
    static final String CLUSTER_NAME = Q + "cluster.name";
    static final String OUTPUT_TOPIC = Q + "output.topic";
    static final String OUTPUT_KAFKA_PREFIX = Q + "output.kafka.";
    /** Whether the decision topic lives on this cluster, so that its name is exempt from a stop. */
    static final String OUTPUT_TOPIC_HERE = Q + "output.topic.on.this.cluster";
    /** Deprecated and ignored: a client chooses its own id, so an exemption by client id exempts anyone. */
    static final String EXCLUDED_CLIENT_IDS = Q + "excluded.client.ids";
    /** What a stop refuses on this broker (StopAuthorizer): the record's topics, or every topic. */
    static final String STOP_SCOPE = Q + "stop.scope";
    static final String STOP_SCOPE_TOPICS = "topics";
    static final String STOP_SCOPE_CLUSTER = "cluster";
    static final String PRODUCE_FLOOR = Q + "produce.quota.floor";
    static final String MAX_MUTE = Q + "throttle.max.mute";
    /** A stop admits about N x 1 MiB / 60 s per broker, near Strimzi's measured share; clients back within 60 s. */
    static final String DEFAULT_MAX_MUTE = "PT60S";
    /** Kafka's own broker settings: the quota sensors' window, which the stop limit's arithmetic depends on. */
    static final String QUOTA_WINDOW_NUM = "quota.window.num";
    static final String QUOTA_WINDOW_SIZE = "quota.window.size.seconds";
    static final String MAX_CLOCK_SKEW = Q + "reader.max.clock.skew";
    static final String STATE_DIR = Q + "state.dir";
    /** The keys decision records are signed with (DecisionSignature); never printed. */
    static final String SIGNING_KEYS = Q + "signing.keys";
    /** Kafka's own broker settings naming its data directories: the last decision is kept beside that data. */
    static final List<String> DATA_DIRS = List.of("log.dirs", "log.dir", "metadata.log.dir");
    /** Kafka's default log.dir. */
    static final String KAFKA_DEFAULT_LOG_DIR = "/tmp/kafka-logs";
    /** How far a record's observed_at or decided_at may be ahead of the reader's clock (docs/broker-side.md). */
    static final String DEFAULT_MAX_CLOCK_SKEW = "PT30S";
    static final String DEFAULT_TOPIC = "__quota_throttle_factors";
    static final String DEFAULT_CONSUMER_CLIENT_ID = "quota-pipeline-callback";

    /** The property table: name, default (null: none), validation, documentation. */
    static final ConfigDef DEFINITION = new ConfigDef()
            .define(PRODUCE, STRING, null, rule(v -> PropertyRules.atLeast(v, 0.0)), HIGH,
                    "Produce quota in bytes/s shared by all clients of the broker, scaled by the throttle factor; unlimited when not set")
            .define(FETCH, STRING, null, rule(v -> PropertyRules.atLeast(v, 0.0)), HIGH,
                    "Fetch quota in bytes/s shared by all clients, never scaled; unlimited when not set")
            .define(REQUEST, STRING, null, rule(v -> PropertyRules.atLeast(v, 0.0)), HIGH,
                    "Request quota shared by all clients, never scaled; unlimited when not set")
            .define(EXCLUDED_PRINCIPALS, STRING, null, rule(PropertyRules::principalNames), MEDIUM,
                    "';'-separated User:<name> principals that are never limited")
            .define(FALLBACK, STRING, "1.0", rule(v -> PropertyRules.between(v, 0.0, 1.0)), MEDIUM,
                    "Factor applied when no valid decision is held")
            .define(VALIDITY, STRING, "PT5M", rule(Iso8601::duration), MEDIUM,
                    "How long after start the callback waits for a first decision before applying the fallback (ISO-8601); records carry their own valid_until")
            .define(CLUSTER_NAME, STRING, null, rule(v -> v), HIGH,
                    "The record key the pipeline publishes this cluster's decisions under (required)")
            .define(OUTPUT_TOPIC, STRING, DEFAULT_TOPIC, rule(PropertyRules::topic), MEDIUM,
                    "The compacted decision topic")
            .define(OUTPUT_TOPIC_HERE, STRING, null, rule(PropertyRules::bool), MEDIUM,
                    "true: the decision topic lives on this cluster, and a stop never refuses its writes (the record that lifts the stop must get through); false: a topic of that name here is anyone's and a stop refuses it like any other. Default: true without " + OUTPUT_KAFKA_PREFIX + "bootstrap.servers, else false; set true when that names another listener of this cluster")
            .define(EXCLUDED_CLIENT_IDS, STRING, null, rule(PropertyRules::clientIds), LOW,
                    "Deprecated and ignored: a client chooses its own id, so no client is exempt by its id; exempt the pipeline's principal with " + EXCLUDED_PRINCIPALS)
            .define(STOP_SCOPE, STRING, STOP_SCOPE_TOPICS, rule(PropertyRules::stopScope), MEDIUM,
                    "What a stop refuses (StopAuthorizer): 'topics', the writes to the topics the decision record names (every topic when it names none), or 'cluster', every write")
            .define(PRODUCE_FLOOR, STRING, null, rule(v -> PropertyRules.atLeast(v, 1.0)), LOW,
                    "Deprecated: a fixed per-client produce limit in bytes/s at a stop, instead of the one derived from " + MAX_MUTE)
            .define(MAX_MUTE, STRING, DEFAULT_MAX_MUTE, rule(Iso8601::duration), HIGH,
                    "The longest a producer may stay muted after the release (ISO-8601, at least PT32S with Kafka's default quota window); each client's produce limit at a stop follows from it")
            .define(MAX_CLOCK_SKEW, STRING, DEFAULT_MAX_CLOCK_SKEW, rule(Iso8601::duration), LOW,
                    "How far a record's observed_at or decided_at may be ahead of this broker's clock (ISO-8601); a record further ahead is refused, and a valid_until is honoured at most until observed_at + the validity + this")
            .define(STATE_DIR, STRING, null, rule(v -> v), LOW,
                    "Where the broker keeps the last decision it applied (<cluster>.decision.json), so a restart starts from it when the decision topic cannot be read yet; by default the first of the broker's log.dirs; empty keeps it in memory only")
            .define(SIGNING_KEYS, STRING, null, rule(DecisionSignature::parse), HIGH,
                    "<id>:<secret> entries, ','-separated, at most two: a record not signed (HMAC-SHA-256, header " + DecisionSignature.HEADER + ") with one of them is refused; not set: no signature is required");

    private final Map<String, String> values;
    private final Map<String, Object> consumerSettings;
    private final boolean separateOutput;
    private final String stateDir;

    private final int quotaWindowNum;
    private final int quotaWindowSizeSeconds;

    private CallbackConfig(Map<String, String> values, Map<String, Object> consumerSettings, boolean separateOutput,
                           String stateDir, int quotaWindowNum, int quotaWindowSizeSeconds) {
        this.values = values;
        this.consumerSettings = consumerSettings;
        this.separateOutput = separateOutput;
        this.stateDir = stateDir;
        this.quotaWindowNum = quotaWindowNum;
        this.quotaWindowSizeSeconds = quotaWindowSizeSeconds;
    }

    /**
     * Validates the broker's properties.
     *
     * @throws ConfigException naming every invalid or missing property, in Kafka's words
     */
    static CallbackConfig parse(Map<String, ?> originals) {
        Map<String, String> props = new HashMap<>();
        originals.forEach((k, v) -> {
            if (v != null) {
                props.put(k, v instanceof String ? ((String) v).strip() : String.valueOf(v));
            }
        });
        List<String> problems = new ArrayList<>();
        Map<String, String> values = new HashMap<>();
        for (ConfigDef.ConfigKey key : DEFINITION.configKeys().values()) {
            String value = props.containsKey(key.name) ? props.get(key.name) : (String) key.defaultValue;
            try {
                key.validator.ensureValid(key.name, value);
                values.put(key.name, value);
            } catch (ConfigException e) {
                problems.add(e.getMessage());
            }
        }
        String cluster = props.getOrDefault(CLUSTER_NAME, "");
        if (cluster.isEmpty()) {
            problems.add(missing(CLUSTER_NAME,
                    "set it to the key the pipeline publishes this cluster's decisions under (its own quota.pipeline.cluster.name)"));
        }
        Map<String, Object> consumer = consumerSettings(props, problems);
        String muteProblem = muteProblem(values.get(MAX_MUTE), props);
        if (muteProblem != null) {
            problems.add(muteProblem);
        }
        if (!problems.isEmpty()) {
            throw new ConfigException(String.join("; ", problems));
        }
        String stateDir = values.get(STATE_DIR) != null ? values.get(STATE_DIR) : dataDir(props);
        boolean separate = props.containsKey(OUTPUT_KAFKA_PREFIX + ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
        return new CallbackConfig(values, consumer, separate, stateDir, windowNum(props), windowSizeSeconds(props));
    }

    private static Map<String, Object> withPrefix(Map<String, String> props, String prefix) {
        Map<String, Object> out = new HashMap<>();
        props.forEach((k, v) -> {
            if (k.startsWith(prefix)) {
                out.put(k.substring(prefix.length()), v);
            }
        });
        return out;
    }

    /**
     * quota.pipeline.output.kafka.* alone when they name a cluster (bootstrap.servers), else laid over
     * client.quota.callback.static.kafka.admin.*: without a bootstrap of their own they tune the client of the observed
     * cluster, which then holds the decision topic (the job's stall warning advises such a setting). As Python.
     */
    private static Map<String, Object> consumerSettings(Map<String, String> props, List<String> problems) {
        Map<String, Object> output = withPrefix(props, OUTPUT_KAFKA_PREFIX);
        boolean separate = output.containsKey(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
        String prefix = separate ? OUTPUT_KAFKA_PREFIX : ADMIN_PREFIX;
        Map<String, Object> settings = separate ? output : withPrefix(props, ADMIN_PREFIX);
        if (!separate) {
            settings.putAll(output);
        }
        String bootstrap = (String) settings.get(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
        if (bootstrap == null) {
            problems.add(missing(OUTPUT_KAFKA_PREFIX + ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                    "the host:port list of the cluster that holds the decision topic (or set "
                            + ADMIN_PREFIX + ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG + " when it is the observed cluster)"));
            return settings;
        }
        try {
            settings.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, PropertyRules.hostList(bootstrap));
        } catch (IllegalArgumentException e) {
            problems.add(new ConfigException(prefix + ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                    e.getMessage()).getMessage());
            return settings;
        }
        // The callback reads with assign from offset 0, never in a group, and must not create the topic.
        settings.remove(ConsumerConfig.GROUP_ID_CONFIG);
        settings.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        settings.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        settings.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        settings.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        settings.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // After an outage of the output cluster the next decision must reach the broker at once: with the client's
        // 10 s (the value used before) a stop published as the cluster came back was applied up to 10 s late (the
        // fault campaign, seed 1: full-rate production for 10 s at factor 0). 2 s keeps the broker log to one
        // reconnect warning per 2 s during an outage.
        settings.putIfAbsent(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "2000");
        try {
            ConsumerConfig.configDef().parse(settings);
        } catch (ConfigException e) {
            problems.add("in " + prefix + "*: " + e.getMessage());
        }
        return settings;
    }

    private static String missing(String name, String what) {
        return "Missing required configuration \"" + name + "\": " + what;
    }

    private static ConfigDef.Validator rule(Function<String, ?> read) {
        return (name, value) -> {
            if (value == null) {
                return;  // not set and no default: the getter answers "unlimited" or the like
            }
            try {
                read.apply((String) value);
            } catch (IllegalArgumentException e) {
                throw new ConfigException(name, PropertyRules.isSecret(name) ? "[hidden]" : value, e.getMessage());
            }
        };
    }

    /** The max mute below the shortest one the stop limit's arithmetic holds for (StopLimit), in Kafka's words. */
    private static String muteProblem(String mute, Map<String, String> props) {
        if (mute == null) {
            return null;  // invalid already reported
        }
        double size = windowSizeSeconds(props);
        double shortest = StopLimit.shortestMute(windowNum(props) * size, (windowNum(props) - 1) * size);
        if (Iso8601.duration(mute).toNanos() / 1e9 >= shortest) {
            return null;
        }
        return new ConfigException(MAX_MUTE, mute, "must be at least (quota.window.num - 1) x quota.window.size.seconds"
                + " + 2 quota windows (PT" + PropertyRules.plain(shortest) + "S): a shorter mute lets smaller requests be "
                + "charged twice").getMessage();
    }

    private static int windowNum(Map<String, String> props) {
        return positiveInt(props.get(QUOTA_WINDOW_NUM), StopLimit.DEFAULT_WINDOW_NUM);
    }

    private static int windowSizeSeconds(Map<String, String> props) {
        return positiveInt(props.get(QUOTA_WINDOW_SIZE), StopLimit.DEFAULT_WINDOW_SIZE_SECONDS);
    }

    /** Kafka validates its own settings; an unreadable one here falls back to Kafka's default. */
    private static int positiveInt(String raw, int fallback) {
        try {
            int value = Integer.parseInt(raw);
            return value > 0 ? value : fallback;
        } catch (NumberFormatException | NullPointerException e) {
            return fallback;
        }
    }

    /** Warnings to log at start: deprecated properties, and a static quota a stop cannot lower. */
    List<String> stopWarnings() {
        List<String> warnings = new ArrayList<>();
        if (values.get(EXCLUDED_CLIENT_IDS) != null) {
            warnings.add(EXCLUDED_CLIENT_IDS + " is deprecated and ignored: a client chooses its own id, so it let any "
                    + "client that named itself so escape every stop; no client is exempt by its id now. Remove it; "
                    + "exempt the pipeline's principal with " + EXCLUDED_PRINCIPALS + " and let writes to the decision "
                    + "topic through with io.quotapipeline.callback.StopAuthorizer (docs/broker-side.md)");
        }
        StopLimit stop = stopLimit();
        if (produceFloor() != null) {
            warnings.add(PRODUCE_FLOOR + " is deprecated: it fixes each client's limit at a stop to " + produceFloor()
                    + " bytes/s (a 1 MiB request muted about " + PropertyRules.plain(Math.round(stop.muteSeconds(0)))
                    + " s); remove it and set " + MAX_MUTE + " (the longest mute after the release) instead");
        }
        Double produce = staticQuotas().get(ClientQuotaType.PRODUCE);
        if (produce != null && stop.enterLimit() >= produce) {
            warnings.add(PRODUCE + " (" + produce + ") is not above the per-client limit at a stop ("
                    + stop.enterLimit() + " bytes/s): a throttle cannot lower the produce quota; raise "
                    + MAX_MUTE + " or the static quota");
        }
        return warnings;
    }

    /** The per-client limit at a stop, from the max mute and the broker's quota window (or the deprecated floor). */
    StopLimit stopLimit() {
        return new StopLimit(maxMute().toNanos() / 1e9, quotaWindowNum, quotaWindowSizeSeconds, produceFloor());
    }

    Duration maxMute() {
        return Iso8601.duration(values.get(MAX_MUTE));
    }

    /** The static quotas that are set; a missing type is unlimited. */

    Map<ClientQuotaType, Double> staticQuotas() {
        Map<ClientQuotaType, Double> quotas = new EnumMap<>(ClientQuotaType.class);
        putIfSet(quotas, ClientQuotaType.PRODUCE, PRODUCE);
        putIfSet(quotas, ClientQuotaType.FETCH, FETCH);
        putIfSet(quotas, ClientQuotaType.REQUEST, REQUEST);
        return quotas;
    }

    private void putIfSet(Map<ClientQuotaType, Double> quotas, ClientQuotaType type, String key) {
        if (values.get(key) != null) {
            quotas.put(type, PropertyRules.atLeast(values.get(key), 0.0));
        }
    }

    Set<String> excludedPrincipalNames() {
        String raw = values.get(EXCLUDED_PRINCIPALS);
        return raw == null ? Set.of() : PropertyRules.principalNames(raw);
    }

    /** True when {@code quota.pipeline.stop.scope} is {@code cluster}: a stop refuses every topic's writes. */
    boolean stopScopeClusterWide() {
        return STOP_SCOPE_CLUSTER.equals(PropertyRules.stopScope(values.get(STOP_SCOPE)));
    }

    /**
     * True when the decision topic lives on this cluster ({@code quota.pipeline.output.topic.on.this.cluster}): as
     * set, else true unless {@code quota.pipeline.output.kafka.bootstrap.servers} names a cluster. That may be another
     * listener of this one, but only the operator knows: the default then grants the decision topic's name no
     * exemption from a stop. As the Python Config.decision_topic_here.
     */
    boolean decisionTopicHere() {
        String raw = values.get(OUTPUT_TOPIC_HERE);
        return raw == null ? !separateOutput : PropertyRules.bool(raw);
    }

    double fallback() {
        return PropertyRules.between(values.get(FALLBACK), 0.0, 1.0);
    }

    Duration validity() {
        return Iso8601.duration(values.get(VALIDITY));
    }

    Duration maxClockSkew() {
        return Iso8601.duration(values.get(MAX_CLOCK_SKEW));
    }

    /** The deprecated fixed per-client limit at a stop, null when not set. */
    Double produceFloor() {
        String raw = values.get(PRODUCE_FLOOR);
        return raw == null ? null : PropertyRules.atLeast(raw, 1.0);
    }

    String clusterName() {
        return values.get(CLUSTER_NAME);
    }

    /** Where the last applied decision is kept across restarts (empty: nowhere). */
    String stateDir() {
        return stateDir;
    }

    /**
     * The broker's first data directory: the first of log.dirs, else log.dir, else metadata.log.dir, else Kafka's
     * default log.dir. Only the broker's user writes there, unlike a shared temp dir where any local user could
     * plant a file or a link first. The file goes in the directory itself: Kafka takes every subdirectory of a log
     * dir for a partition and refuses to start on one that is not.
     */
    static String dataDir(Map<String, String> props) {
        for (String name : DATA_DIRS) {
            String raw = props.get(name);
            if (raw != null) {
                for (String dir : raw.split(",")) {
                    if (!dir.isBlank()) {
                        return dir.strip();
                    }
                }
            }
        }
        return KAFKA_DEFAULT_LOG_DIR;
    }

    /** The keys records must be signed with; none: records are taken signed or not. */
    DecisionSignature signature() {
        String raw = values.get(SIGNING_KEYS);
        return raw == null ? DecisionSignature.NONE : new DecisionSignature(DecisionSignature.parse(raw));
    }

    String topic() {
        return values.get(OUTPUT_TOPIC);
    }

    /**
     * Settings for the follower's KafkaConsumer (Java client names), with the callback's fixed ones. Without a
     * configured client.id the consumer is {@code quota-pipeline-callback}, with {@code -<n>} for the n-th callback
     * of the JVM: a combined broker+controller node loads two, and client ids name JMX beans.
     */
    Map<String, Object> consumerSettings(int instance) {
        Map<String, Object> settings = new HashMap<>(consumerSettings);
        settings.putIfAbsent(ConsumerConfig.CLIENT_ID_CONFIG,
                DEFAULT_CONSUMER_CLIENT_ID + (instance > 1 ? "-" + instance : ""));
        return settings;
    }

    /** Consumer settings as they may be logged: every setting Kafka types as a password, and secret names, masked. */
    static Map<String, Object> forLog(Map<String, Object> settings) {
        Map<String, Object> shown = new TreeMap<>();
        settings.forEach((k, v) -> shown.put(k,
                PasswordKeys.contains(k) || PropertyRules.isSecret(k) ? "[hidden]" : v));
        return shown;
    }
}
