package io.quotapipeline.callback;

import java.time.Clock;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.Monitorable;
import org.apache.kafka.common.metrics.PluginMetrics;

/**
 * {@link PipelineQuotaCallback} that also reports its metrics through Kafka's plugin metrics (KIP-877), so every
 * metrics reporter of the broker sees them, beside the JMX MBeans. For Kafka 4.1 and later, whose quota manager
 * hands plugin metrics to the callback; older brokers lack the {@code Monitorable} interface and must load
 * {@link PipelineQuotaCallback} instead.
 */
public class MonitorablePipelineQuotaCallback extends PipelineQuotaCallback implements Monitorable {
    private PluginMetrics pluginMetrics;
    private final List<MetricName> added = new ArrayList<>();

    /** The constructor Kafka uses. */
    public MonitorablePipelineQuotaCallback() {
        super();
    }

    MonitorablePipelineQuotaCallback(Clock clock, FollowerFactory followers) {
        super(clock, followers);
    }

    @Override
    public synchronized void configure(Map<String, ?> configs) {
        super.configure(configs);
        removeMetrics();  // configure() built new metric readers: register those
        addMetrics();
    }

    /** Kafka calls this after configure(); the metrics are added when both have happened, in either order. */
    @Override
    public synchronized void withPluginMetrics(PluginMetrics metrics) {
        this.pluginMetrics = metrics;
        addMetrics();
    }

    private void addMetrics() {
        if (pluginMetrics == null || !added.isEmpty()) {
            return;
        }
        for (CallbackMetrics.Metric metric : metrics()) {
            Gauge<Double> gauge = (config, now) -> metric.value().getAsDouble();
            MetricName name = pluginMetrics.metricName(metric.kafkaName(), metric.description(), new LinkedHashMap<>());
            pluginMetrics.addMetric(name, gauge);
            added.add(name);
        }
    }

    private void removeMetrics() {
        if (pluginMetrics != null) {
            added.forEach(pluginMetrics::removeMetric);
        }
        added.clear();
    }
}
