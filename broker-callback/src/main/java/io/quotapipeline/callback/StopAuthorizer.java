package io.quotapipeline.callback;

import java.time.Clock;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.function.Function;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.Monitorable;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.server.authorizer.Authorizer;

/**
 * The stop that refuses writes ({@link BasicStopAuthorizer}) for Kafka 4.1 and later: it also reports through Kafka's
 * plugin metrics (KIP-877) and hands them to its delegate, whose StandardAuthorizer cannot answer without them.
 * {@code authorizer.class.name=io.quotapipeline.callback.StopAuthorizer}; brokers before 4.1 lack the
 * {@code Monitorable} interface and name {@link BasicStopAuthorizer} instead.
 */
public class StopAuthorizer extends BasicStopAuthorizer implements Monitorable {
    private final List<MetricName> pluginMetricNames = new ArrayList<>();
    private PluginMetrics pluginMetrics;  // guarded by this

    /** The constructor Kafka uses. */
    public StopAuthorizer() {
        super();
    }

    /** For tests: an injected clock, record feed and delegate maker (class name to instance). */
    StopAuthorizer(Clock clock, FollowerFactory followers, Function<String, Authorizer> delegates) {
        super(clock, followers, delegates);
    }

    /** Kafka calls this after configure(); either order works. */
    @Override
    public synchronized void withPluginMetrics(PluginMetrics metrics) {
        this.pluginMetrics = metrics;
        addPluginMetrics(metrics);
    }

    @Override
    synchronized void afterConfigure() {
        if (pluginMetrics != null) {
            addPluginMetrics(pluginMetrics);  // Kafka handed them before configure()
        }
    }

    private void addPluginMetrics(PluginMetrics metrics) {
        List<CallbackMetrics.Metric> ours = metrics();
        if (ours.isEmpty()) {
            return;  // not configured yet
        }
        if (delegate() instanceof Monitorable) {
            ((Monitorable) delegate()).withPluginMetrics(metrics);
        }
        pluginMetricNames.forEach(metrics::removeMetric);  // a new configure() made new readers
        pluginMetricNames.clear();
        for (CallbackMetrics.Metric metric : ours) {
            Gauge<Double> gauge = (config, now) -> metric.value().getAsDouble();
            MetricName name = metrics.metricName(metric.kafkaName(), metric.description(), new LinkedHashMap<>());
            metrics.addMetric(name, gauge);
            pluginMetricNames.add(name);
        }
    }
}
