package io.quotapipeline.callback;

import java.time.Instant;

/** The fields every decision record must carry besides the factor, its source and its dates (DecisionRecord). */
final class TestRecords {
    private TestRecords() {
    }

    /** cluster_id, decided_at (= observed_at), status and the counts, as JSON members without braces. */
    static String required(Instant observed) {
        return "\"cluster_id\": \"c1\", \"decided_at\": \"" + observed + "\", \"status\": \"SUCCESS\", "
                + "\"active_brokers\": 3, \"active_log_dirs\": 6, \"violations\": 0";
    }
}
