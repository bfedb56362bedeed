package io.quotapipeline.callback;

import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * Answers Kafka's quotaResetRequired: true once for each quota type at first (as Strimzi does), then true once
 * after each change of what is answered for that type (for produce: the factor, or the stop limit at a stop). Kafka asks on every request from many threads; a
 * compare-and-set makes exactly one of them see each change.
 */
final class ResetTracker {
    private final Map<ClientQuotaType, AtomicReference<Object>> acknowledged = new EnumMap<>(ClientQuotaType.class);

    ResetTracker() {
        for (ClientQuotaType type : ClientQuotaType.values()) {
            acknowledged.put(type, new AtomicReference<>());
        }
    }

    /** True when {@code answered} differs from what Kafka last read for {@code type}; it is then acknowledged. */
    boolean resetRequired(ClientQuotaType type, Object answered) {
        AtomicReference<Object> last = acknowledged.get(type);
        Object previous = last.get();
        if (answered.equals(previous)) {
            return false;
        }
        return last.compareAndSet(previous, answered);
    }
}
