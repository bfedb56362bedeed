package io.quotapipeline.callback;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;

/**
 * What StopAuthorizer.authorize costs per produce request (one WRITE action), with and without a stop in force, next
 * to its delegate alone: Kafka's StandardAuthorizer (the default), and one that allows all (delegate none), whose
 * difference from the wrapped call is the stop check's own cost. Not a JMH benchmark: run by hand (bench/RESULTS.md, "Stop authorizer: cost of
 * authorize"):
 *
 * <pre>
 * mvn -q -f broker-callback test-compile
 * java -cp "broker-callback/target/classes:broker-callback/target/test-classes:$KAFKA_HOME/libs/*" \
 *     io.quotapipeline.callback.AuthorizeBench
 * </pre>
 */
public final class AuthorizeBench {
    private static final Instant NOW = Instant.parse("2026-11-21T10:00:00Z");
    private static final int ROUNDS = 7;
    private static final int CALLS = 2_000_000;
    private static volatile Object sink;

    private AuthorizeBench() {
    }

    public static void main(String[] args) throws Exception {
        AuthorizableRequestContext alice = RequestContexts.of("User:alice", "app");
        List<Action> write = List.of(RequestContexts.write("orders"));
        List<String> many = new ArrayList<>();
        for (int i = 0; i < 1000; i++) {
            many.add("\"full-" + i + "\"");
        }
        String targeted = "{\"scope\": \"topics\", \"topics\": [" + String.join(", ", many) + "]}";
        List<Action> listed = List.of(RequestContexts.write("full-500"));

        StandardAuthorizer alone = standard();
        Bench noStop = new Bench(1.0, null);
        Bench graded = new Bench(0.5, null);
        Bench cluster = new Bench(0.0, null);
        Bench target = new Bench(0.0, targeted);
        NoAuthorizer allowAll = new NoAuthorizer();
        Bench noneNoStop = new Bench(1.0, null, StopAuthorizer.NONE);
        Bench noneStop = new Bench(0.0, null, StopAuthorizer.NONE);
        Map<String, Supplier<List<AuthorizationResult>>> cases = new LinkedHashMap<>();
        cases.put("a delegate that allows all (NoAuthorizer) alone", () -> allowAll.authorize(alice, write));
        cases.put("StopAuthorizer around it (delegate none), no stop in force",
                () -> noneNoStop.authorizer.authorize(alice, write));
        cases.put("StopAuthorizer around it (delegate none), stop of the cluster: write refused",
                () -> noneStop.authorizer.authorize(alice, write));
        cases.put("StandardAuthorizer alone (allow.everyone.if.no.acl.found)", () -> alone.authorize(alice, write));
        cases.put("StopAuthorizer, no stop in force (factor 1.0)", () -> noStop.authorizer.authorize(alice, write));
        cases.put("StopAuthorizer, graded factor 0.5 (no stop)", () -> graded.authorizer.authorize(alice, write));
        cases.put("StopAuthorizer, stop of the cluster: write refused", () -> cluster.authorizer.authorize(alice, write));
        cases.put("StopAuthorizer, stop of 1,000 topics: unlisted topic (delegate asked)",
                () -> target.authorizer.authorize(alice, write));
        cases.put("StopAuthorizer, stop of 1,000 topics: listed topic refused",
                () -> target.authorizer.authorize(alice, listed));
        // Rounds interleave the cases, so a burst of load on the machine does not favour one; the best round counts.
        Map<String, Double> best = new LinkedHashMap<>();
        for (int round = 0; round < ROUNDS; round++) {
            for (Map.Entry<String, Supplier<List<AuthorizationResult>>> c : cases.entrySet()) {
                best.merge(c.getKey(), time(c.getValue()), Math::min);
            }
        }
        best.forEach((what, ns) -> System.out.printf("%-75s %7.1f ns per call%n", what, ns));
        for (Bench b : List.of(noStop, graded, cluster, target, noneNoStop, noneStop)) {
            b.authorizer.close();
        }
        alone.close();
    }

    private static StandardAuthorizer standard() {
        StandardAuthorizer authorizer = new StandardAuthorizer();
        authorizer.configure(Map.of("allow.everyone.if.no.acl.found", "true"));
        authorizer.withPluginMetrics(new PluginMetricsImpl(new Metrics(), Map.of()));
        authorizer.loadSnapshot(Map.of());
        authorizer.completeInitialLoad();
        return authorizer;
    }

    /** A StopAuthorizer around StandardAuthorizer holding one decision of {@code factor}. */
    private static final class Bench {
        final StopAuthorizer authorizer;

        Bench(double factor, String stop) {
            this(factor, stop, StopAuthorizer.DEFAULT_DELEGATE);
        }

        Bench(double factor, String stop, String delegate) {
            List<RecordSink> sinks = new ArrayList<>();
            authorizer = new StopAuthorizer(new MutableClock(NOW), (topic, settings, s) -> {
                sinks.add(s);
                return () -> { };
            }, StopAuthorizer::newDelegate);
            Map<String, Object> props = new HashMap<>();
            props.put("quota.pipeline.cluster.name", "bench-" + factor + (stop == null ? "" : "-targeted") + "-"
                    + delegate.length());
            props.put(StopAuthorizer.DELEGATE, delegate);
            props.put("quota.pipeline.output.kafka.bootstrap.servers", "127.0.0.1:9");
            props.put("quota.pipeline.state.dir", "");
            props.put("allow.everyone.if.no.acl.found", "true");
            authorizer.configure(props);
            authorizer.withPluginMetrics(new PluginMetricsImpl(new Metrics(), Map.of()));
            authorizer.loadSnapshot(Map.of());
            authorizer.completeInitialLoad();
            String value = "{\"schema_version\": 2, " + TestRecords.required(NOW) + ", \"observed_at\": \"" + NOW + "\", \"throttle_factor\": " + factor
                    + ", \"source\": \"OBSERVATION\", \"valid_until\": \"" + NOW.plusSeconds(300) + "\""
                    + (stop == null ? "" : ", \"stop\": " + stop) + "}";
            sinks.get(0).accept(props.get("quota.pipeline.cluster.name").toString().getBytes(StandardCharsets.UTF_8),
                    value.getBytes(StandardCharsets.UTF_8), "");
        }
    }

    /** Nanoseconds per call over CALLS calls. */
    private static double time(Supplier<List<AuthorizationResult>> call) {
        long start = System.nanoTime();
        for (int i = 0; i < CALLS; i++) {
            sink = call.get();
        }
        return (System.nanoTime() - start) / (double) CALLS;
    }
}
