package io.quotapipeline.callback;

import java.util.EnumMap;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Strimzi's quota rule with the pipeline's exemptions: produce x factor, and at a stop a per-client limit derived
 * from the longest mute (StopLimit); fetch and request unscaled; excluded principals unlimited. No client is exempt
 * by its client id: a client chooses its own. Where StopAuthorizer refuses the writes at a stop ({@code refusal}), a
 * factor of 0 mutes no client: produce stays at the static quota, so no mute outlasts the release; graded factors
 * scale it as before. Pure: the factor, the window epoch and the stop's age are passed in.
 */
final class QuotaPolicy {
    /** Strimzi's Quota.upperBound(Double.MAX_VALUE): no limit. */
    static final double UNLIMITED = Double.MAX_VALUE;
    /** Kafka divides by the limit: never answer less than this (Strimzi's floor). */
    static final double MIN_QUOTA = 1.0;
    static final String QUOTA_TYPE_TAG = "quota.type";
    /** Strimzi's tag for an excluded principal, kept so dashboards of both plugins read the same. */
    static final String EXCLUDED_PRINCIPAL_TAG = "excluded-principal-quota-key";
    /** The produce window's epoch (QuotaWindows): a new value is a new sensor, hence an empty window. */
    static final String WINDOW_TAG = "quota.window";
    /**
     * The window value of a client's own stop sensor. It carries no epoch: it only ever holds bytes charged at a
     * stop limit, so every stop reuses it and the cut applies to the bytes the client sent in the last stops.
     */
    static final String STOP_WINDOW = "stop";
    /** Kafka's own tag names, so a client's stop sensor reads like a Kafka client quota's. */
    static final String USER_TAG = "user";
    static final String CLIENT_ID_TAG = "client-id";

    private final Map<ClientQuotaType, Double> staticQuotas;
    private final Set<String> excludedPrincipalNames;
    private final StopLimit stop;
    private final boolean refusal;

    QuotaPolicy(Map<ClientQuotaType, Double> staticQuotas, Set<String> excludedPrincipalNames, StopLimit stop) {
        this(staticQuotas, excludedPrincipalNames, stop, false);
    }

    /**
     * @param refusal StopAuthorizer refuses the writes at factor 0 on this broker: the quota then mutes nobody there
     */
    QuotaPolicy(Map<ClientQuotaType, Double> staticQuotas, Set<String> excludedPrincipalNames, StopLimit stop,
                boolean refusal) {
        this.staticQuotas = new EnumMap<>(staticQuotas);
        this.excludedPrincipalNames = Set.copyOf(excludedPrincipalNames);
        this.stop = stop;
        this.refusal = refusal;
    }

    /** True when a stop is a refusal of writes (StopAuthorizer), not a throttle. */
    boolean refusal() {
        return refusal;
    }

    /**
     * True when the factor is a stop that StopAuthorizer refuses writes at, so the quota leaves producers alone: a
     * mute given at the stop would outlast the release (Kafka does not unmute when the quota rises).
     */
    boolean refused(double factor) {
        return refusal && factor == 0.0;
    }

    StopLimit stop() {
        return stop;
    }

    /**
     * The tags Kafka groups clients by: one quota shared by every client of a type (Strimzi's broker-wide
     * quota), and one unlimited group for the exempt ones. Produce clients share the window of epoch
     * {@code window}; at a stop each (user, client id) is charged on its own stop sensor, so that one producer's
     * bytes never lengthen another's mute (a shared window's mute grows with the number of producers) and each
     * mute stays within the longest one configured. Called on every request: no allocation beyond the map.
     */
    Map<String, String> metricTags(ClientQuotaType type, KafkaPrincipal principal, String clientId, double factor,
                                   long window) {
        Map<String, String> tags = new HashMap<>(8);
        tags.put(QUOTA_TYPE_TAG, type.name());
        // Strimzi compares KafkaPrincipal.getName() with the names after "User:".
        if (principal != null && excludedPrincipalNames.contains(principal.getName())) {
            tags.put(EXCLUDED_PRINCIPAL_TAG, "true");
        } else if (type == ClientQuotaType.PRODUCE) {
            if (stopped(factor)) {
                tags.put(WINDOW_TAG, STOP_WINDOW);
                tags.put(USER_TAG, principal == null ? "" : principal.getName());
                tags.put(CLIENT_ID_TAG, clientId == null ? "" : clientId);
            } else {
                tags.put(WINDOW_TAG, Long.toString(window));
            }
        }
        return tags;
    }

    /**
     * The limit for the clients that share {@code tags}, at throttle factor {@code factor}, a stop having lasted
     * {@code stopAgeSeconds}: a stop sensor has the stop limit, a shared window the shared one.
     */
    double limit(ClientQuotaType type, Map<String, String> tags, double factor, double stopAgeSeconds) {
        if ("true".equals(tags.get(EXCLUDED_PRINCIPAL_TAG))) {
            return UNLIMITED;
        }
        if (type != ClientQuotaType.PRODUCE) {
            return Math.max(MIN_QUOTA, staticQuota(type));
        }
        // A sensor left from a graded stop is not kept muted while the authorizer refuses the writes.
        return STOP_WINDOW.equals(tags.get(WINDOW_TAG)) && !refused(factor) ? stopLimit(stopAgeSeconds)
                : sharedLimit(factor);
    }

    /** The produce limit a client is charged at now: the stop limit at a stop, else the shared one. */
    double produceLimit(double factor, double stopAgeSeconds) {
        return stopped(factor) ? stopLimit(stopAgeSeconds) : sharedLimit(factor);
    }

    /**
     * The static produce quota x factor shared by the clients of a window, never below the limit a stop starts
     * with, which never raises the static quota (a throttle never raises a quota); at least {@link #MIN_QUOTA}, as
     * Kafka divides by it.
     */
    double sharedLimit(double factor) {
        double quota = staticQuota(ClientQuotaType.PRODUCE);
        if (refused(factor)) {
            return Math.max(MIN_QUOTA, quota);  // the authorizer stops the writes; the quota mutes nobody
        }
        return Math.max(MIN_QUOTA, Math.max(Math.min(stop.enterLimit(), quota), quota * factor));
    }

    /** Each client's own limit at a stop of that age, never above the static quota; at least {@link #MIN_QUOTA}. */
    double stopLimit(double stopAgeSeconds) {
        return Math.max(MIN_QUOTA, Math.min(stop.limit(stopAgeSeconds), staticQuota(ClientQuotaType.PRODUCE)));
    }

    /**
     * True when production is stopped: the factor leaves the shared produce limit at or below what one client gets
     * when a stop starts (and that is below the static quota). Factor 0 always is, unless the static quota is
     * already that small or StopAuthorizer refuses the writes instead.
     */
    boolean stopped(double factor) {
        if (refused(factor)) {
            return false;
        }
        double quota = staticQuota(ClientQuotaType.PRODUCE);
        double enter = stop.enterLimit();
        return quota * factor <= enter && enter < quota;
    }

    /** The configured static quota of a type, {@link #UNLIMITED} when not set. */
    double staticQuota(ClientQuotaType type) {
        return staticQuotas.getOrDefault(type, UNLIMITED);
    }
}
