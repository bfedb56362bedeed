package io.quotapipeline.callback;

import java.lang.management.ManagementFactory;
import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.DoubleSupplier;

import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.InstanceAlreadyExistsException;
import javax.management.JMException;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.apache.kafka.server.quota.ClientQuotaType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The callback's metrics on the broker's JMX: one MBean per metric,
 * {@code io.quotapipeline.callback:type=PipelineQuotaCallback,name=<Name>}, with a {@code Value} (gauges) or
 * {@code Count} (counters) attribute like Strimzi's Yammer metrics. Registration problems are logged, never fatal.
 */
final class CallbackMetrics implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(CallbackMetrics.class);
    static final String DOMAIN = "io.quotapipeline.callback";
    static final String TYPE = "PipelineQuotaCallback";

    /**
     * One metric.
     *
     * @param name        the JMX name (Strimzi style)
     * @param kafkaName   the name under Kafka's plugin metrics (Kafka style)
     * @param description what it means
     * @param counter     a count (attribute Count) rather than a level (attribute Value)
     * @param value       reads it now
     */
    record Metric(String name, String kafkaName, String description, boolean counter, DoubleSupplier value) {
    }

    private final MBeanServer server;
    private final String type;
    private final List<ObjectName> registered = new ArrayList<>();
    private int instance = 1;

    private CallbackMetrics(MBeanServer server, String type) {
        this.server = server;
        this.type = type;
    }

    /** The metrics of one callback, read from its holder and policy at the time they are read. */
    static List<Metric> definitions(DecisionHolder holder, QuotaPolicy policy, Clock clock) {
        return List.of(
                new Metric("ThrottleFactor", "throttle-factor",
                        "The throttle factor the callback applies now [0..1]", false,
                        () -> holder.answer(clock.instant()).factor()),
                new Metric("FallbackApplied", "fallback-applied",
                        "1 while the callback applies its own fallback factor (no valid decision), else 0", false,
                        () -> holder.answer(clock.instant()).basis() == Answer.Basis.FALLBACK ? 1.0 : 0.0),
                new Metric("DecisionAgeSeconds", "decision-age-seconds",
                        "Seconds since observed_at of the latest decision held; -1 before the first one", false,
                        () -> decisionAge(holder.answer(clock.instant()), clock)),
                new Metric("RecordsApplied", "records-applied",
                        "Decision records of this cluster taken", true, holder::applied),
                new Metric("RecordsSkipped", "records-skipped",
                        "Records that could not be parsed (invalid JSON, unknown schema_version, bad fields)", true,
                        holder::skipped),
                new Metric("RecordsRefused", "records-refused",
                        "Records refused because their observed_at or decided_at is further ahead of the broker's "
                                + "clock than quota.pipeline.reader.max.clock.skew; they never replace the decision "
                                + "in force", true, holder::refused),
                new Metric("Produce", "produce-quota", "The configured static produce quota (bytes/s)", false,
                        () -> policy.staticQuota(ClientQuotaType.PRODUCE)),
                new Metric("Fetch", "fetch-quota", "The configured static fetch quota (bytes/s)", false,
                        () -> policy.staticQuota(ClientQuotaType.FETCH)),
                new Metric("Request", "request-quota", "The configured static request quota", false,
                        () -> policy.staticQuota(ClientQuotaType.REQUEST)));
    }

    private static double decisionAge(Answer answer, Clock clock) {
        if (answer.record() == null) {
            return -1.0;
        }
        return Duration.between(answer.record().observedAt(), clock.instant()).toMillis() / 1000.0;
    }

    /** Registers every metric on the platform MBean server; a second callback in the JVM gets instance=2. */
    static CallbackMetrics register(List<Metric> metrics) {
        return register(TYPE, metrics);
    }

    /** Registers every metric under {@code type=<type>} (StopAuthorizer has its own); instance=n as above. */
    static CallbackMetrics register(String type, List<Metric> metrics) {
        CallbackMetrics jmx = new CallbackMetrics(ManagementFactory.getPlatformMBeanServer(), type);
        String instance = "";
        for (int n = 2; n < 100 && jmx.taken(metrics.get(0).name(), instance); n++) {
            instance = ",instance=" + n;
            jmx.instance = n;
        }
        for (Metric metric : metrics) {
            try {
                ObjectName name = objectName(type, metric.name(), instance);
                jmx.server.registerMBean(new MetricBean(metric), name);
                jmx.registered.add(name);
            } catch (InstanceAlreadyExistsException e) {
                log.warn("JMX metric {} is already registered; not registered again", metric.name());
            } catch (JMException | RuntimeException e) {
                log.warn("cannot register JMX metric {}: {}", metric.name(), e.toString());
            }
        }
        return jmx;
    }

    static ObjectName objectName(String name, String instance) throws JMException {
        return objectName(TYPE, name, instance);
    }

    static ObjectName objectName(String type, String name, String instance) throws JMException {
        return new ObjectName(DOMAIN + ":type=" + type + ",name=" + name + instance);
    }

    private boolean taken(String name, String instance) {
        try {
            return server.isRegistered(objectName(type, name, instance));
        } catch (JMException e) {
            return false;
        }
    }

    /** 1 for the first callback of the JVM, n for the n-th one alive at the same time. */
    int instance() {
        return instance;
    }

    List<ObjectName> names() {
        return List.copyOf(registered);
    }

    @Override
    public void close() {
        for (ObjectName name : registered) {
            try {
                server.unregisterMBean(name);
            } catch (JMException | RuntimeException e) {
                log.debug("cannot unregister {}", name, e);
            }
        }
        registered.clear();
    }

    /** One read-only attribute: Value (a double) or Count (a long). */
    private static final class MetricBean implements DynamicMBean {
        private final Metric metric;
        private final String attribute;

        MetricBean(Metric metric) {
            this.metric = metric;
            this.attribute = metric.counter() ? "Count" : "Value";
        }

        @Override
        public Object getAttribute(String name) throws AttributeNotFoundException {
            if (!attribute.equals(name)) {
                throw new AttributeNotFoundException(name);
            }
            double value = metric.value().getAsDouble();
            return metric.counter() ? (Object) (long) value : (Object) value;
        }

        @Override
        public void setAttribute(Attribute attribute) throws AttributeNotFoundException {
            throw new AttributeNotFoundException("read-only: " + attribute.getName());
        }

        @Override
        public AttributeList getAttributes(String[] names) {
            AttributeList list = new AttributeList();
            for (String name : names) {
                if (attribute.equals(name)) {
                    list.add(new Attribute(name, getValueQuietly()));
                }
            }
            return list;
        }

        private Object getValueQuietly() {
            try {
                return getAttribute(attribute);
            } catch (AttributeNotFoundException e) {
                return null;
            }
        }

        @Override
        public AttributeList setAttributes(AttributeList attributes) {
            return new AttributeList();
        }

        @Override
        public Object invoke(String action, Object[] params, String[] signature) {
            throw new UnsupportedOperationException(action);
        }

        @Override
        public MBeanInfo getMBeanInfo() {
            String type = metric.counter() ? long.class.getName() : double.class.getName();
            MBeanAttributeInfo info = new MBeanAttributeInfo(attribute, type, metric.description(), true, false, false);
            return new MBeanInfo(MetricBean.class.getName(), metric.description(),
                    new MBeanAttributeInfo[] {info}, null, null, null);
        }
    }
}
