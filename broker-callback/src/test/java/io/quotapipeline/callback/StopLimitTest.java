package io.quotapipeline.callback;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.Quota;
import org.apache.kafka.common.metrics.QuotaViolationException;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Rate;
import org.junit.jupiter.api.Test;

/**
 * The stop limit against Kafka's own quota sensor (kafka-clients' Sensor and Rate, as ClientQuotaManager uses them,
 * with its throttle time (rate - bound) / bound x window): a client that sends 1 MiB requests whenever it is unmuted.
 */
class StopLimitTest {
    private static final double MIB = StopLimit.REFERENCE_REQUEST_BYTES;

    /** One client's requests at a stop: when each was admitted and the mute it got. */
    private record Run(List<Long> admittedAtMs, List<Long> mutesMs) {
        long longestMuteMs() {
            return mutesMs.stream().mapToLong(Long::longValue).max().orElse(0);
        }
    }

    /** Requests of {@code bytes} sent back to back for {@code seconds}, charged as Kafka charges them. */
    private static Run run(StopLimit stop, double bytes, double seconds) {
        return run(stop, bytes, seconds, 0.0);
    }

    /** As above, the stop having lasted {@code startAge} seconds already. */
    private static Run run(StopLimit stop, double bytes, double seconds, double startAge) {
        try (Metrics metrics = new Metrics()) {
            MetricName name = metrics.metricName("byte-rate", "Produce", Map.of("client-id", "c"));
            Sensor sensor = metrics.sensor("Produce-c");
            sensor.add(name, new Rate(), config(stop.limit(startAge)));
            KafkaMetric metric = metrics.metric(name);
            List<Long> admitted = new ArrayList<>();
            List<Long> mutes = new ArrayList<>();
            long now = 1_000_000;  // any start
            long end = now + (long) (seconds * 1000);
            long start = now;
            while (now < end) {
                // quotaResetRequired -> updateQuotaMetricConfigs: the bound follows the stop's age
                metric.config(config(stop.limit(startAge + (now - start) / 1000.0)));
                admitted.add(now - start);
                long mute = 0;
                try {
                    sensor.record(bytes, now, true);
                } catch (QuotaViolationException e) {
                    double window = new Rate().windowSize(metric.config(), now);  // ClientQuotaManager's window
                    mute = Math.round((e.value() - e.bound()) / e.bound() * window);
                }
                mutes.add(mute);
                now += Math.max(mute, 5);  // the next request is read when the mute ends
            }
            return new Run(admitted, mutes);
        }
    }

    private static MetricConfig config(double bound) {
        return new MetricConfig().timeWindow(1, TimeUnit.SECONDS).samples(11).quota(Quota.upperBound(bound));
    }

    @Test
    void theLimitFollowsTheMuteOfTheStopsAge() {
        StopLimit stop = new StopLimit(60, 11, 1, null);
        assertEquals(32.0, stop.shortestMuteSeconds(), "10 s measured + 2 quota windows of 11 s");
        assertEquals(MIB / 42, stop.limit(0));
        assertEquals(32.0, stop.muteSeconds(16.9));
        assertEquals(34.0, stop.muteSeconds(17.0));
        assertEquals(60.0, stop.muteSeconds(30.0));
        assertEquals(MIB / 70, stop.limit(1e9));
        StopLimit fixed = new StopLimit(60, 11, 1, 65536.0);
        assertEquals(65536.0, fixed.limit(1e9));
        assertEquals(6.0, fixed.muteSeconds(0));
    }

    @Test
    void onKafkasSensorTheCutBitesAtOnceAndNoMuteExceedsTheMax() {
        Run run = run(new StopLimit(60, 11, 1, null), MIB, 180);
        assertEquals(32_000, run.mutesMs().get(0), 100, "the first request is muted: no fresh-window burst");
        assertTrue(run.longestMuteMs() <= 60_000, "longest mute " + run.longestMuteMs());
        // One request per mute: at the cut, 32 s later, then every 60 s.
        assertEquals(List.of(0L, 32_000L, 92_000L, 152_000L), run.admittedAtMs().stream()
                .map(ms -> Math.round(ms / 1000.0) * 1000).toList());
    }

    @Test
    void noRequestSizeUpToTheReferenceIsMutedLongerThanTheMax() {
        List<String> over = new ArrayList<>();
        for (double max : new double[] {32, 40, 45, 60, 120, 300}) {
            StopLimit stop = new StopLimit(max, 11, 1, null);
            for (double bytes : new double[] {16_384, 100_000, 300_000, 500_000, 700_000, 880_000, 1_000_000, MIB}) {
                Run run = run(stop, bytes, 300, 1e6);
                if (run.longestMuteMs() > max * 1000 + 500) {
                    over.add(max + " s / " + bytes + " B: " + run.longestMuteMs() + " ms");
                }
            }
        }
        assertEquals(List.of(), over);
    }

    @Test
    void whileTheMuteLengthensNoRequestSizeIsMutedLongerThanTheMax() {
        StopLimit stop = new StopLimit(60, 11, 1, null);
        for (double bytes : new double[] {16_384, 100_000, 300_000, 500_000, 700_000, 880_000, 1_000_000, MIB}) {
            Run run = run(stop, bytes, 300);
            assertTrue(run.longestMuteMs() <= 60_500, bytes + " B: longest mute " + run.longestMuteMs());
        }
    }

    @Test
    void smallRequestsAreHeldToTheLimit() {
        StopLimit stop = new StopLimit(60, 11, 1, null);
        Run run = run(stop, 16_384, 300, 1e6);  // the Java client's batches
        double admitted = run.admittedAtMs().size() * 16_384.0 / 300;
        assertTrue(admitted <= stop.limit(1e6) * 1.1, "admitted " + admitted + " bytes/s");
    }

    @Test
    void aStopResumedWithinTheMaxMuteContinuesAndALaterOneStartsAgain() {
        StopClock clock = new StopClock(Duration.ofSeconds(60));
        Instant t0 = Instant.parse("2026-11-21T10:00:00Z");
        assertEquals(0.0, clock.age(t0, false));
        assertEquals(0.0, clock.age(t0, true));
        assertEquals(100.0, clock.age(t0.plusSeconds(100), true), "silence while stopped is no release");
        assertEquals(110.0, clock.age(t0.plusSeconds(110), false));
        assertEquals(150.0, clock.age(t0.plusSeconds(150), true), "resumed 40 s after the release: continues");
        clock.age(t0.plusSeconds(160), false);
        assertEquals(0.0, clock.age(t0.plusSeconds(300), false));
        assertEquals(0.0, clock.age(t0.plusSeconds(300), true), "140 s after the release: a new stop");
        assertEquals(5.0, clock.age(t0.plusSeconds(305), true));
    }
}
