package io.quotapipeline.callback;

import java.time.Clock;
import java.time.Instant;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaCallback;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The broker's quota callback (KIP-257): Strimzi's static quotas with the produce quota scaled by the throttle
 * factor the quota pipeline publishes on a compacted topic.
 *
 * <p>{@code client.quota.callback.class=io.quotapipeline.callback.PipelineQuotaCallback}. A daemon thread follows
 * the topic; {@link #quotaLimit} only reads the held decision and the clock, so it never blocks, and it never
 * throws. Only invalid configuration fails the broker's start.
 */
public class PipelineQuotaCallback implements ClientQuotaCallback {
    /** Named, not loaded: StopAuthorizer cannot load before Kafka 4.1 (no plugin metrics). */
    static final String STOP_AUTHORIZER = "io.quotapipeline.callback.StopAuthorizer";
    private static final Logger log = LoggerFactory.getLogger(PipelineQuotaCallback.class);

    private final Clock clock;
    private final FollowerFactory followers;
    private final ResetTracker resets = new ResetTracker();
    private volatile Configured configured;

    /** What configure() builds; one immutable value so request threads see all of it or none. */
    private record Configured(CallbackConfig config, DecisionHolder holder, QuotaPolicy policy,
                              QuotaWindows windows, StopClock stops, List<CallbackMetrics.Metric> metrics,
                              CallbackMetrics jmx, Follower follower) {
    }

    /** The constructor Kafka uses. */
    public PipelineQuotaCallback() {
        this(SharedFollowers.SYSTEM_CLOCK, SharedFollowers.TOPIC_FOLLOWERS);
    }

    /** For tests: an injected clock and record feed. */
    PipelineQuotaCallback(Clock clock, FollowerFactory followers) {
        this.clock = clock;
        this.followers = followers;
    }

    /**
     * Reads the callback's properties from the broker configuration and starts following the decision topic.
     *
     * @throws ConfigException naming the invalid property; the broker then refuses to start
     */
    @Override
    public void configure(Map<String, ?> configs) {
        CallbackConfig config = CallbackConfig.parse(configs);
        close();
        KafkaDefects.warnOnce(log, KafkaVersion.get());
        // A combined broker+controller node configures two callbacks, and StopAuthorizer follows the same topic:
        // they share one follower (SharedFollowers).
        SharedFollowers.Lease lease = SharedFollowers.acquire(config, followers, clock);
        DecisionHolder holder = lease.holder();
        String authorizer = authorizerClassName(configs);
        boolean refusal = authorizer != null && BasicStopAuthorizer.CLASS_NAMES.contains(authorizer);
        QuotaPolicy policy = new QuotaPolicy(config.staticQuotas(), config.excludedPrincipalNames(),
                config.stopLimit(), refusal);
        List<CallbackMetrics.Metric> metrics = CallbackMetrics.definitions(holder, policy, clock);
        CallbackMetrics jmx = CallbackMetrics.register(metrics);
        Map<String, Object> consumer = config.consumerSettings(jmx.instance());
        RecordSink sink = SharedFollowers.sink(config, holder);
        if (!lease.follow(() -> followers.start(config.topic(), consumer, sink))) {
            log.info("quota callback for cluster {} shares the decision follower of {} with {} other callback(s) of "
                    + "this JVM", config.clusterName(), config.topic(), lease.users() - 1);
        }
        Follower follower = lease;
        configured = new Configured(config, holder, policy, new QuotaWindows(), new StopClock(config.maxMute()),
                metrics, jmx, follower);
        config.stopWarnings().forEach(log::warn);
        log.info("quota callback for cluster {}: topic {}, consumer {}, static quotas {}, validity {}, fallback {}, "
                        + "stop: {}, excluded principals {}, max clock skew {}, {}",
                config.clusterName(), config.topic(), CallbackConfig.forLog(consumer), config.staticQuotas(),
                config.validity(), config.fallback(), describeStop(policy), config.excludedPrincipalNames(),
                config.maxClockSkew(), config.signature().describe());
    }

    @Override
    public Map<String, String> quotaMetricTags(ClientQuotaType quotaType, KafkaPrincipal principal, String clientId) {
        Configured c = configured;
        try {
            if (c != null) {
                Instant now = clock.instant();
                double factor = c.holder().answer(now).factor();
                long window = 0;
                if (quotaType == ClientQuotaType.PRODUCE) {
                    boolean stopped = c.policy().stopped(factor);
                    c.stops().age(now, stopped);
                    // Only shared limits move the shared window: a stop's clients are on their own sensors.
                    window = stopped ? 0 : c.windows().epoch(c.policy().sharedLimit(factor));
                }
                return c.policy().metricTags(quotaType, principal, clientId, factor, window);
            }
        } catch (RuntimeException e) {
            log.warn("quota metric tags failed; the client shares the broker-wide quota", e);
        }
        return Map.of(QuotaPolicy.QUOTA_TYPE_TAG, quotaType.name());
    }

    @Override
    public Double quotaLimit(ClientQuotaType quotaType, Map<String, String> metricTags) {
        Configured c = configured;
        if (c == null) {
            return QuotaPolicy.UNLIMITED;
        }
        try {
            Instant now = clock.instant();
            double factor = c.holder().answer(now).factor();
            return c.policy().limit(quotaType, metricTags, factor, c.stops().age(now, c.policy().stopped(factor)));
        } catch (RuntimeException e) {
            log.warn("quota limit failed; answering with the fallback factor", e);
            return c.policy().limit(quotaType, Map.of(), c.config().fallback(), 0.0);
        }
    }

    /**
     * True once at first and then once after each change of the answered factor (for PRODUCE), and at a stop after
     * each change of the per-client stop limit (its mute lengthens): Kafka then re-reads every sensor's limit.
     */
    @Override
    public boolean quotaResetRequired(ClientQuotaType quotaType) {
        Configured c = configured;
        if (c == null) {
            return false;
        }
        try {
            if (quotaType != ClientQuotaType.PRODUCE) {
                return resets.resetRequired(quotaType, 1.0);  // never scaled: only the first call is true
            }
            Instant now = clock.instant();
            Answer answer = c.holder().answer(now);
            boolean stopped = c.policy().stopped(answer.factor());
            double stopLimit = c.policy().stopLimit(c.stops().age(now, stopped));
            Object answered = stopped ? List.of(answer.factor(), stopLimit) : answer.factor();
            boolean changed = resets.resetRequired(quotaType, answered);
            if (changed) {
                log.info("throttle factor of {} is now {} ({}){}", c.holder().cluster(), answer.factor(),
                        answer.reason(), stopped ? String.format(": stopped, each client %.0f bytes/s (a 1 MiB "
                                + "request muted %.0f s)", stopLimit, c.policy().stop().muteSeconds(
                                c.stops().age(now, true))) : "");
            }
            return changed;
        } catch (RuntimeException e) {
            log.warn("quotaResetRequired failed", e);
            return false;
        }
    }

    /** Client quotas set with kafka-configs are not used while this callback is loaded (as with Strimzi's). */
    @Override
    public void updateQuota(ClientQuotaType quotaType, ClientQuotaEntity quotaEntity, double newValue) {
        log.debug("ignored a client quota update for {} ({}): the callback's static quotas apply", quotaEntity,
                quotaType);
    }

    @Override
    public void removeQuota(ClientQuotaType quotaType, ClientQuotaEntity quotaEntity) {
        log.debug("ignored a client quota removal for {} ({})", quotaEntity, quotaType);
    }

    @Override
    public boolean updateClusterMetadata(Cluster cluster) {
        return false;
    }

    /** The broker's authorizer.class.name, or null. */
    private static String authorizerClassName(Map<String, ?> configs) {
        Object value = configs.get(BasicStopAuthorizer.AUTHORIZER_CLASS_NAME);
        return value == null ? null : (value instanceof Class<?> ? ((Class<?>) value).getName()
                : String.valueOf(value).strip());
    }

    /** Which stop is in force with this configuration and what it admits, for the start-up line. */
    static String describeStop(QuotaPolicy policy) {
        if (policy.refusal()) {
            return "refusal by " + STOP_AUTHORIZER + ": writes refused at factor 0, no client muted";
        }
        StopLimit stop = policy.stop();
        String each = stop.fixed()
                ? String.format("each client %.0f bytes/s (deprecated fixed floor)", stop.enterLimit())
                : String.format("each client %.0f down to %.0f bytes/s, a 1 MiB request muted %.0f s lengthening to "
                        + "at most %.0f s", policy.stopLimit(0), policy.stopLimit(Double.MAX_VALUE),
                        stop.muteSeconds(0), stop.maxMuteSeconds());
        return "throttle at factor 0, " + each + "; producers below that per-client limit are not slowed (set "
                + BasicStopAuthorizer.AUTHORIZER_CLASS_NAME + "=" + STOP_AUTHORIZER + " to refuse writes; "
                + BasicStopAuthorizer.class.getName() + " before Kafka 4.1)";
    }

    /** Stops the follower thread (within a few seconds) and unregisters the metrics. */
    @Override
    public void close() {
        Configured c = configured;
        if (c == null) {
            return;
        }
        configured = null;
        Follower.closeWith(c.follower(), c.jmx());
    }

    /** The answer in force now; null before configure(). */
    Answer answer() {
        Configured c = configured;
        return c == null ? null : c.holder().answer(clock.instant());
    }

    /** The quota rule in force; null before configure(). */
    QuotaPolicy policy() {
        Configured c = configured;
        return c == null ? null : c.policy();
    }

    DecisionHolder holder() {
        Configured c = configured;
        return c == null ? null : c.holder();
    }

    /** The metric definitions, for Kafka's plugin metrics; empty before configure(). */
    List<CallbackMetrics.Metric> metrics() {
        Configured c = configured;
        return c == null ? List.of() : c.metrics();
    }

    List<javax.management.ObjectName> jmxNames() {
        Configured c = configured;
        return c == null ? List.of() : c.jmx().names();
    }
}
