package io.quotapipeline.callback;

import java.util.Set;

import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.server.authorizer.Action;

/**
 * Which writes a stop refuses (StopAuthorizer; the Python reader's {@code refuses} says the same). Pure: the answer in
 * force is passed in.
 *
 * <p>At factor 0 a write to a topic is refused unless it is exempt ({@link #exempt}, the Python
 * core/exemption.py's StopExemption): the topic is one of Kafka's internal topics (consumer offsets, transactions and
 * share groups must not fail because a disk filled), or the decision topic when this cluster holds it (the record that
 * lifts the stop must get through; on a cluster that does not hold it a topic of that name is anyone's, and anyone who
 * may create it would write through every stop), or the principal is excluded. Within those, the stop's scope decides:
 * the whole cluster when the reader says so ({@code quota.pipeline.stop.scope=cluster}), when the factor is not a
 * published decision (the fallback, the initial period) or when the record names no well-formed topic list; else the
 * topics it lists. No exemption goes by client id: a client chooses its own.
 */
final class RefusalPolicy {
    /** Kafka's internal topics, written by the broker on the clients' behalf. */
    static final Set<String> INTERNAL_TOPICS = Set.of("__consumer_offsets", "__transaction_state",
            "__share_group_state");

    /** The decision topic when this cluster holds it, else null. */
    private final String decisionTopic;
    private final Set<String> excludedPrincipalNames;
    private final boolean clusterWide;

    /**
     * @param decisionTopic the decision topic when this cluster holds it, null when it lives on another cluster
     * @param clusterWide the reader's {@code quota.pipeline.stop.scope} is {@code cluster}: every stop refuses every
     *                    topic's writes, whatever the record says
     */
    RefusalPolicy(String decisionTopic, Set<String> excludedPrincipalNames, boolean clusterWide) {
        this.decisionTopic = decisionTopic;
        this.excludedPrincipalNames = Set.copyOf(excludedPrincipalNames);
        this.clusterWide = clusterWide;
    }

    static RefusalPolicy of(CallbackConfig config) {
        return new RefusalPolicy(config.decisionTopicHere() ? config.topic() : null, config.excludedPrincipalNames(),
                config.stopScopeClusterWide());
    }

    /** The scope of the stop in force under {@code answer}, or null when writes are not stopped. */
    StopScope inForce(Answer answer) {
        if (answer.factor() != 0.0) {
            return null;
        }
        if (clusterWide || answer.basis() != Answer.Basis.RECORD || answer.record() == null) {
            return StopScope.CLUSTER;
        }
        return answer.record().stop();
    }

    /** The decision topic when this cluster holds it, else null: the log says what the stop lets through. */
    String exemptDecisionTopic() {
        return decisionTopic;
    }

    /** True when no stop refuses {@code principalName}'s (null: none) write to {@code topic}. */
    boolean exempt(String principalName, String topic) {
        return INTERNAL_TOPICS.contains(topic)
                || topic.equals(decisionTopic)
                || (principalName != null && excludedPrincipalNames.contains(principalName));
    }

    /** True when the stop {@code scope} (null: none) refuses {@code principalName}'s write to {@code topic}. */
    boolean refuses(StopScope scope, String topic, String principalName) {
        return scope != null && topic != null && !exempt(principalName, topic) && scope.covers(topic);
    }

    /** True when {@code action} is a write to a topic that the stop {@code scope} refuses. */
    boolean refuses(StopScope scope, Action action, String principalName) {
        if (action.operation() != AclOperation.WRITE) {
            return false;
        }
        ResourcePattern pattern = action.resourcePattern();
        return pattern.resourceType() == ResourceType.TOPIC && refuses(scope, pattern.name(), principalName);
    }
}
