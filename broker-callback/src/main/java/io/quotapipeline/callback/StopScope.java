package io.quotapipeline.callback;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * What a factor of 0 stops, as a decision record's {@code stop} says: the writes to some topics (those with a replica
 * on a log dir at its hard limit), or every write of the cluster.
 *
 * <p>Read leniently: a record is acted on whatever its {@code stop} looks like, and anything but a well-formed
 * {@code {"scope": "topics", "topics": [strings]}} (absent, null, {@code "cluster"}, malformed) means the whole
 * cluster, the safe reading of a stop. The topics are kept as a Set, so a lookup costs one hash.
 *
 * @param topics the stopped topics, or null for the whole cluster
 */
record StopScope(Set<String> topics) {
    static final String TOPICS = "topics";
    static final String CLUSTER_NAME = "cluster";
    /** Every write of the cluster. */
    static final StopScope CLUSTER = new StopScope(null);

    StopScope {
        topics = topics == null ? null : Set.copyOf(topics);
    }

    boolean clusterWide() {
        return topics == null;
    }

    /** True when writes to {@code topic} are within this stop. */
    boolean covers(String topic) {
        return topics == null || topics.contains(topic);
    }

    /** The record's {@code stop} field (a missing node when absent); never throws. */
    static StopScope of(JsonNode stop) {
        if (stop == null || !stop.isObject() || !TOPICS.equals(stop.path("scope").textValue())) {
            return CLUSTER;
        }
        JsonNode topics = stop.path(TOPICS);
        if (!topics.isArray()) {
            return CLUSTER;
        }
        List<String> names = new ArrayList<>(topics.size());
        for (JsonNode topic : topics) {
            if (!topic.isTextual()) {
                return CLUSTER;
            }
            names.add(topic.textValue());
        }
        return new StopScope(Set.copyOf(names));
    }

    /** For log lines: the scope and, for a few topics, their names (the record's text: quoted, escaped, cut). */
    String describe() {
        if (topics == null) {
            return "every topic of the cluster";
        }
        List<String> sorted = new ArrayList<>();
        topics.stream().sorted().forEach(topic -> sorted.add(Printable.quote(topic, 80)));
        String shown = sorted.size() <= 10 ? String.join(", ", sorted)
                : String.join(", ", sorted.subList(0, 10)) + " and " + (sorted.size() - 10) + " more";
        return sorted.size() + " topic(s): " + shown;
    }
}
