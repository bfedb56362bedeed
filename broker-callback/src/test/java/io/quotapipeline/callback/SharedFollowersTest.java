package io.quotapipeline.callback;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A combined broker+controller node configures two callbacks: they share one decision follower. */
class SharedFollowersTest {
    private static final Instant START = Instant.parse("2026-11-21T10:00:00Z");
    private final MutableClock clock = new MutableClock(START);
    private final List<RecordSink> sinks = new ArrayList<>();
    private final List<Boolean> closed = new ArrayList<>();
    private final List<PipelineQuotaCallback> callbacks = new ArrayList<>();
    /** One factory for every callback, as Kafka's instances share the real one. */
    private final FollowerFactory factory = (topic, settings, sink) -> {
        sinks.add(sink);
        int index = closed.size();
        closed.add(false);
        return () -> closed.set(index, true);
    };

    private PipelineQuotaCallback callback(Map<String, Object> extra) {
        Map<String, Object> props = new HashMap<>();
        props.put("quota.pipeline.cluster.name", "c1");
        props.put("quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9");
        props.put("client.quota.callback.static.throttle.factor.fallback", "0.5");
        props.put("quota.pipeline.state.dir", "");  // no last decision shared between tests
        props.putAll(extra);
        PipelineQuotaCallback callback = new PipelineQuotaCallback(clock, factory);
        callback.configure(props);
        callbacks.add(callback);
        return callback;
    }

    private static byte[] record(Instant observed, double factor) {
        return ("{\"schema_version\": 1, " + TestRecords.required(observed) + ", \"observed_at\": \"" + observed + "\", \"throttle_factor\": " + factor
                + ", \"source\": \"OBSERVATION\", \"valid_until\": \"" + observed.plusSeconds(300) + "\"}")
                .getBytes(StandardCharsets.UTF_8);
    }

    @AfterEach
    void closeAll() {
        callbacks.forEach(PipelineQuotaCallback::close);
        assertEquals(0, SharedFollowers.followers(), "every follower stops with its last callback");
    }

    @Test
    void twoCallbacksOfOneConfigurationShareOneFollowerUntilTheLastCloses() {
        PipelineQuotaCallback broker = callback(Map.of());
        PipelineQuotaCallback controller = callback(Map.of());
        assertEquals(1, sinks.size(), "one consumer of the decision topic per JVM");
        assertSame(broker.holder(), controller.holder());

        sinks.get(0).accept("c1".getBytes(StandardCharsets.UTF_8), record(START, 0.0), "");
        assertEquals(0.0, broker.answer().factor());
        assertEquals(0.0, controller.answer().factor());

        broker.close();  // the broker's quota manager shuts down first: the controller's keeps its decisions
        assertFalse(closed.get(0));
        sinks.get(0).accept("c1".getBytes(StandardCharsets.UTF_8), record(START.plusSeconds(1), 1.0), "");
        assertEquals(1.0, controller.answer().factor());
        assertEquals(1, SharedFollowers.followers());

        controller.close();
        assertTrue(closed.get(0), "the last callback's close stops the follower");
        assertEquals(0, SharedFollowers.followers());
    }

    @Test
    void aReconfiguredCallbackReleasesItsShareAndTakesANewOne() {
        PipelineQuotaCallback first = callback(Map.of());
        PipelineQuotaCallback second = callback(Map.of());
        second.configure(Map.of("quota.pipeline.cluster.name", "c1", "quota.pipeline.state.dir", "",
                "quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9",
                "client.quota.callback.static.throttle.factor.fallback", "0.5"));
        assertEquals(1, sinks.size());
        first.close();
        assertFalse(closed.get(0), "the reconfigured callback still shares the follower");
    }

    @Test
    void anotherClusterTopicOrConnectionGetsItsOwnFollower() {
        callback(Map.of());
        callback(Map.of("quota.pipeline.cluster.name", "c2"));
        callback(Map.of("quota.pipeline.output.topic", "other-decisions"));
        callback(Map.of("quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:10"));
        callback(Map.of("quota.pipeline.output.kafka.security.protocol", "SSL"));
        assertEquals(5, sinks.size());
        assertEquals(5, SharedFollowers.followers());
    }
}
