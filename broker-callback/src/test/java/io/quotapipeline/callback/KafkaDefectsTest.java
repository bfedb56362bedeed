package io.quotapipeline.callback;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** KAFKA-20746 is named on the releases known to have it, and on no other. */
class KafkaDefectsTest {
    @Test
    void affectedReleasesGetOneWarningThatPointsToEnforce() {
        for (String version : new String[] {"4.0.0", "4.0.1", "4.1.0", "4.1.1", "4.2.0", "4.2.1", "4.3.0", "4.3.1"}) {
            String warning = KafkaDefects.metadataFaultWarning(version);
            assertNotNull(warning, version);
            assertTrue(warning.startsWith("Kafka " + version + " has KAFKA-20746"), warning);
            assertTrue(warning.contains("quota-pipeline enforce"), warning);
        }
    }

    @Test
    void releasesWithoutThePublisherOrWithTheFixGetNone() {
        for (String version : new String[] {"3.9.1", "3.3.2", "4.2.2", "4.3.2", "4.4.0", "5.0.0", "unknown", "", null,
                "4.1"}) {
            assertNull(KafkaDefects.metadataFaultWarning(version), String.valueOf(version));
        }
    }
}
