package io.quotapipeline.callback;

/** Something that feeds decision records to the callback until closed (the topic follower, or a test's). */
interface Follower extends AutoCloseable {
    /** Stops feeding; returns within the broker's shutdown and never throws. */
    @Override
    void close();

    /** Closes {@code follower}, then {@code metrics} whatever the first did: a plugin's shutdown, in that order. */
    static void closeWith(Follower follower, CallbackMetrics metrics) {
        try {
            follower.close();
        } finally {
            metrics.close();
        }
    }
}
