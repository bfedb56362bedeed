package io.quotapipeline.callback;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;

import org.apache.kafka.common.KafkaException;

/**
 * The version of the Kafka the broker runs, read from the resource kafka-clients carries, as Kafka's own
 * AppInfoParser reads it: that class moved between releases (to an internals package in 4.4), the resource did not.
 */
final class KafkaVersion {
    static final String RESOURCE = "/kafka/kafka-version.properties";
    static final String UNKNOWN = "unknown";

    private KafkaVersion() {
    }

    /** The broker's Kafka version, or {@value #UNKNOWN}. */
    static String get() {
        try (InputStream in = KafkaException.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                return UNKNOWN;
            }
            Properties props = new Properties();
            props.load(in);
            return props.getProperty("version", UNKNOWN).trim();
        } catch (IOException | IllegalArgumentException e) {
            return UNKNOWN;
        }
    }
}
