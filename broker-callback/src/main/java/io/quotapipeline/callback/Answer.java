package io.quotapipeline.callback;

/**
 * The factor the callback applies at one instant, and why.
 *
 * @param factor the produce quota multiplier
 * @param basis  where it comes from
 * @param reason a short explanation for logs
 * @param record the held record, or null before the first one (or after a tombstone)
 */
record Answer(double factor, Basis basis, String reason, DecisionRecord record) {

    /** Where an answer comes from; the same three words as the Python reader's {@code Answer.basis}. */
    enum Basis {
        /** A valid published decision. */
        RECORD,
        /** The callback's own throttle.factor.fallback. */
        FALLBACK,
        /** 1.0 for one validity after start, before any record. */
        INITIAL
    }
}
