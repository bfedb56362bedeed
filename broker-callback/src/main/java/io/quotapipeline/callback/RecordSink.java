package io.quotapipeline.callback;

/** Where the follower hands each topic record; must not throw. */
@FunctionalInterface
interface RecordSink {
    /**
     * @param key       the record key (the cluster name), or null
     * @param value     the record value, or null for a tombstone
     * @param signature the value of the record's {@value DecisionSignature#HEADER} header, or null
     * @param where     the record's position, for log lines (" at topic/partition@offset")
     */
    void accept(byte[] key, byte[] value, byte[] signature, String where);

    /** An unsigned record. */
    default void accept(byte[] key, byte[] value, String where) {
        accept(key, value, null, where);
    }
}
