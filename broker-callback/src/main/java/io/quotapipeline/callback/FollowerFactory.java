package io.quotapipeline.callback;

/** Starts the record feed for a configured callback: the real topic follower, or a test's. */
@FunctionalInterface
interface FollowerFactory {
    Follower start(CallbackConfig config, RecordSink sink);
}
