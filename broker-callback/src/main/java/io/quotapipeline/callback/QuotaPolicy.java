package io.quotapipeline.callback;

import java.util.EnumMap;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Strimzi's quota rule with the pipeline's exemptions: produce x factor (floored), fetch and request unscaled,
 * excluded principals and excluded client ids unlimited. Pure: the factor and the window epoch are passed in.
 */
final class QuotaPolicy {
    /** Strimzi's Quota.upperBound(Double.MAX_VALUE): no limit. */
    static final double UNLIMITED = Double.MAX_VALUE;
    /** Kafka divides by the limit: never answer less than this (Strimzi's floor). */
    static final double MIN_QUOTA = 1.0;
    static final String QUOTA_TYPE_TAG = "quota.type";
    /** Strimzi's tag for an excluded principal, kept so dashboards of both plugins read the same. */
    static final String EXCLUDED_PRINCIPAL_TAG = "excluded-principal-quota-key";
    static final String EXCLUDED_CLIENT_ID_TAG = "excluded-client-id-quota-key";
    /** The produce window's epoch (QuotaWindows): a new value is a new sensor, hence an empty window. */
    static final String WINDOW_TAG = "quota.window";
    /** Kafka's own tag names, so a client's floor sensor reads like a Kafka client quota's. */
    static final String USER_TAG = "user";
    static final String CLIENT_ID_TAG = "client-id";

    private final Map<ClientQuotaType, Double> staticQuotas;
    private final Set<String> excludedPrincipalNames;
    private final Set<String> excludedClientIds;
    private final double produceFloor;

    QuotaPolicy(Map<ClientQuotaType, Double> staticQuotas, Set<String> excludedPrincipalNames,
                Set<String> excludedClientIds, double produceFloor) {
        this.staticQuotas = new EnumMap<>(staticQuotas);
        this.excludedPrincipalNames = Set.copyOf(excludedPrincipalNames);
        this.excludedClientIds = Set.copyOf(excludedClientIds);
        this.produceFloor = produceFloor;
    }

    /**
     * The tags Kafka groups clients by: one quota shared by every client of a type (Strimzi's broker-wide
     * quota), and one unlimited group for the exempt ones. Produce clients share the window of epoch
     * {@code window}; at the floor each (user, client id) gets a window of its own, so that one producer's bytes
     * never lengthen another's throttle (a shared floor's throttle grows with the number of producers) and each
     * is back within seconds of the release. Called on every request: no allocation beyond the map.
     */
    Map<String, String> metricTags(ClientQuotaType type, KafkaPrincipal principal, String clientId, double factor,
                                   long window) {
        Map<String, String> tags = new HashMap<>(8);
        tags.put(QUOTA_TYPE_TAG, type.name());
        // Strimzi compares KafkaPrincipal.getName() with the names after "User:".
        if (principal != null && excludedPrincipalNames.contains(principal.getName())) {
            tags.put(EXCLUDED_PRINCIPAL_TAG, "true");
        } else if (clientId != null && excludedClientIds.contains(clientId)) {
            tags.put(EXCLUDED_CLIENT_ID_TAG, "true");
        } else if (type == ClientQuotaType.PRODUCE) {
            tags.put(WINDOW_TAG, Long.toString(window));
            if (atFloor(factor)) {
                tags.put(USER_TAG, principal == null ? "" : principal.getName());
                tags.put(CLIENT_ID_TAG, clientId == null ? "" : clientId);
            }
        }
        return tags;
    }

    /** The limit for the clients that share {@code tags}, at throttle factor {@code factor}. */
    double limit(ClientQuotaType type, Map<String, String> tags, double factor) {
        if ("true".equals(tags.get(EXCLUDED_PRINCIPAL_TAG)) || "true".equals(tags.get(EXCLUDED_CLIENT_ID_TAG))) {
            return UNLIMITED;
        }
        return type == ClientQuotaType.PRODUCE ? produceLimit(factor) : Math.max(MIN_QUOTA, staticQuota(type));
    }

    /**
     * The static produce quota x factor, never below the floor, and the floor never above the static quota (a
     * throttle never raises a quota); at least {@link #MIN_QUOTA}, as Kafka divides by it.
     */
    double produceLimit(double factor) {
        double quota = staticQuota(ClientQuotaType.PRODUCE);
        return Math.max(MIN_QUOTA, Math.max(Math.min(produceFloor, quota), quota * factor));
    }

    /** True when the factor leaves the produce limit at the floor (and below the static quota). */
    boolean atFloor(double factor) {
        double quota = staticQuota(ClientQuotaType.PRODUCE);
        return quota * factor <= produceFloor && produceFloor < quota;
    }

    /** The configured static quota of a type, {@link #UNLIMITED} when not set. */
    double staticQuota(ClientQuotaType type) {
        return staticQuotas.getOrDefault(type, UNLIMITED);
    }
}
