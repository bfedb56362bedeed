package io.quotapipeline.callback;

import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Answers Kafka's quotaResetRequired: true once for each quota type at first (as Strimzi does), then true once
 * after each change of the value answered for that type. Kafka asks on every request from many threads; a
 * compare-and-set makes exactly one of them see each change.
 */
final class ResetTracker {
    private final Map<ClientQuotaType, AtomicReference<Double>> acknowledged = new EnumMap<>(ClientQuotaType.class);

    ResetTracker() {
        for (ClientQuotaType type : ClientQuotaType.values()) {
            acknowledged.put(type, new AtomicReference<>());
        }
    }

    /** True when {@code answered} differs from what Kafka last read for {@code type}; it is then acknowledged. */
    boolean resetRequired(ClientQuotaType type, double answered) {
        AtomicReference<Double> last = acknowledged.get(type);
        Double previous = last.get();
        if (previous != null && previous.doubleValue() == answered) {
            return false;
        }
        return last.compareAndSet(previous, answered);
    }
}
