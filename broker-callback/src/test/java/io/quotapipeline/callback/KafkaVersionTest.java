package io.quotapipeline.callback;

import org.apache.kafka.common.utils.AppInfoParser;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The broker's version read without AppInfoParser (which Kafka 4.4 moved) is the one AppInfoParser reports. */
class KafkaVersionTest {
    @Test
    void theVersionIsTheOneKafkasOwnParserReports() {
        String version = KafkaVersion.get();
        assertTrue(version.matches("\\d+\\.\\d+\\.\\d+.*"), version);
        assertEquals(AppInfoParser.getVersion(), version);
    }
}
