package io.quotapipeline.callback;

import java.util.Map;

/** Starts the record feed for a configured callback: the real topic follower, or a test's. */
@FunctionalInterface
interface FollowerFactory {
    /**
     * @param topic    the decision topic
     * @param settings the KafkaConsumer settings
     * @param sink     where each record goes
     */
    Follower start(String topic, Map<String, Object> settings, RecordSink sink);
}
