package io.quotapipeline.callback;

import java.util.EnumMap;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Strimzi's quota rule with the pipeline's exemptions: produce x factor (floored), fetch and request unscaled,
 * excluded principals and excluded client ids unlimited. Pure: the factor is passed in.
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
     * quota), and one unlimited group for the exempt ones. Called on every request: no allocation beyond the map.
     */
    Map<String, String> metricTags(ClientQuotaType type, KafkaPrincipal principal, String clientId) {
        Map<String, String> tags = new HashMap<>(4);
        tags.put(QUOTA_TYPE_TAG, type.name());
        // Strimzi compares KafkaPrincipal.getName() with the names after "User:".
        if (principal != null && excludedPrincipalNames.contains(principal.getName())) {
            tags.put(EXCLUDED_PRINCIPAL_TAG, "true");
        } else if (clientId != null && excludedClientIds.contains(clientId)) {
            tags.put(EXCLUDED_CLIENT_ID_TAG, "true");
        }
        return tags;
    }

    /** The limit for the clients that share {@code tags}, at throttle factor {@code factor}. */
    double limit(ClientQuotaType type, Map<String, String> tags, double factor) {
        if ("true".equals(tags.get(EXCLUDED_PRINCIPAL_TAG)) || "true".equals(tags.get(EXCLUDED_CLIENT_ID_TAG))) {
            return UNLIMITED;
        }
        double quota = staticQuota(type);
        if (type == ClientQuotaType.PRODUCE) {
            return Math.max(produceFloor, quota * factor);
        }
        return Math.max(MIN_QUOTA, quota);
    }

    /** The configured static quota of a type, {@link #UNLIMITED} when not set. */
    double staticQuota(ClientQuotaType type) {
        return staticQuotas.getOrDefault(type, UNLIMITED);
    }
}
