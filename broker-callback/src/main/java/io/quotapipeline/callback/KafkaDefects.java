package io.quotapipeline.callback;

import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.slf4j.Logger;

/**
 * Kafka's own defects a quota callback triggers, by broker version: the callback names them once at start.
 *
 * <p>KAFKA-20746: with any {@code client.quota.callback.class} loaded, KRaft's DynamicTopicClusterQuotaPublisher
 * (added by KAFKA-18225 in 4.0.0) builds a Cluster for the callback with MetadataCache.toCluster, which left fenced
 * brokers out of its node map while partitions still named them as replicas: a NullPointerException ("Encountered
 * metadata publishing fault") on every node whenever a broker holding replicas stops or restarts. Fixed on trunk
 * (apache/kafka#22723) and backported to the 4.2 and 4.3 branches (#22800, #22801) on 2026-07-10; the 4.0 and 4.1
 * branches have no backport. Checked on real brokers (bench/kafka_versions.py): 4.1.0, 4.2.1 and 4.3.1 log the
 * fault, 4.2.2 and 4.4.0 do not; 4.2.0 and 4.3.0 are affected too (Strimzi kafka-quotas-plugin #71 for 4.2.0).
 * Patch releases after 4.3.1 are taken as fixed, as 4.2.2 is (docs/broker-side.md).
 */
final class KafkaDefects {
    private static final Pattern VERSION = Pattern.compile("(\\d+)\\.(\\d+)\\.(\\d+).*");
    private static final AtomicBoolean WARNED = new AtomicBoolean();

    private KafkaDefects() {
    }

    /** Logs the warning for {@code version}, if any, once per JVM (a combined node configures two callbacks). */
    static void warnOnce(Logger log, String version) {
        String warning = metadataFaultWarning(version);
        if (warning != null && WARNED.compareAndSet(false, true)) {
            log.warn(warning);
        }
    }

    /** The warning for a broker of {@code version} (KafkaVersion.get()), or null when none applies. */
    static String metadataFaultWarning(String version) {
        Matcher m = VERSION.matcher(version == null ? "" : version.strip());
        if (!m.matches()) {
            return null;  // "unknown" or a build of one's own: nothing known to say
        }
        int major = Integer.parseInt(m.group(1));
        int minor = Integer.parseInt(m.group(2));
        int patch = Integer.parseInt(m.group(3));
        boolean affected = major == 4 && (minor <= 1 || (minor == 2 || minor == 3) && patch <= 1);
        if (!affected) {
            return null;
        }
        return "Kafka " + version + " has KAFKA-20746: with any client.quota.callback.class loaded, every node logs "
                + "\"Encountered metadata publishing fault\" (a NullPointerException in MetadataCache.toCluster, from "
                + "DynamicTopicClusterQuotaPublisher) whenever a broker holding replicas stops or restarts, and on "
                + "large clusters a broker's metadata cache can stay empty (admin clients list no topics; Strimzi "
                + "kafka-quotas-plugin #71). Fixed in 4.2.2 and 4.4 (and taken as fixed after 4.3.1); upgrade, or "
                + "where it bites use `quota-pipeline enforce` (client quotas, no callback) instead "
                + "of this callback (docs/broker-side.md)";
    }
}
