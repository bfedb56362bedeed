package io.quotapipeline.callback;

/**
 * The per-client produce limit while production is stopped, derived from the longest mute a client may be given
 * after the release ({@code quota.pipeline.throttle.max.mute}). Pure.
 *
 * <p>Kafka appends a produce request, then charges it on the client's quota sensor and mutes the connection for
 * (rate - limit) / limit x the measured window, uncapped, and does not unmute when the limit rises. A client muted
 * at least one quota window ({@code quota.window.num} x {@code quota.window.size.seconds}, 11 s by default) finds
 * its sensor's samples expired, so Kafka measures its next request of S bytes over ({@code num} - 1) x size
 * seconds and mutes it for S / limit - (num - 1) x size. A limit of S / (M + (num - 1) x size) therefore mutes a
 * request of the reference size S for exactly M, lets each librdkafka client about one such request through per M,
 * and on a fresh sensor lets less than one through before the first mute. That holds for every request size up to
 * S only when M is at least (num - 1) x size + 2 x num x size (32 s by default): a smaller request whose first
 * mute ends before its samples expire is charged again with the next one, up to 2 x size / limit - (num - 1) x
 * size (checked on Kafka's own sensor in StopLimitTest: 20 s mutes at 11 s). So that is the shortest mute.
 *
 * <p>The mute lengthens while a stop lasts: twice the stop's age in whole seconds, at least that shortest mute and
 * at most the configured maximum, so clients return sooner after a short stop and a long one is tight.
 */
final class StopLimit {
    /** The largest produce request of default clients: Java's max.request.size (librdkafka's is 1,000,000). */
    static final double REFERENCE_REQUEST_BYTES = 1_048_576.0;
    /** Kafka's defaults: quota.window.num and quota.window.size.seconds. */
    static final int DEFAULT_WINDOW_NUM = 11;
    static final int DEFAULT_WINDOW_SIZE_SECONDS = 1;

    private final double maxMuteSeconds;
    private final double windowSeconds;
    private final double measuredSeconds;
    private final Double floor;

    /**
     * @param floor the deprecated fixed per-client limit ({@code quota.pipeline.produce.quota.floor}) when set:
     *              it replaces the derived limit and the mute does not lengthen; null otherwise
     */
    StopLimit(double maxMuteSeconds, int windowNum, int windowSizeSeconds, Double floor) {
        this.maxMuteSeconds = maxMuteSeconds;
        this.windowSeconds = (double) windowNum * windowSizeSeconds;
        this.measuredSeconds = (double) (windowNum - 1) * windowSizeSeconds;
        this.floor = floor;
    }

    /** The shortest mute the arithmetic holds for, whatever the request size: (num - 1) x size + 2 x num x size. */
    double shortestMuteSeconds() {
        return shortestMute(windowSeconds, measuredSeconds);
    }

    static double shortestMute(double windowSeconds, double measuredSeconds) {
        return measuredSeconds + 2 * windowSeconds;
    }

    double maxMuteSeconds() {
        return maxMuteSeconds;
    }

    boolean fixed() {
        return floor != null;
    }

    /** The longest mute of a reference-size request after a stop of {@code stopAgeSeconds} so far. */
    double muteSeconds(double stopAgeSeconds) {
        if (floor != null) {
            return Math.max(0.0, REFERENCE_REQUEST_BYTES / floor - measuredSeconds);
        }
        return Math.min(maxMuteSeconds,
                Math.max(shortestMuteSeconds(), 2.0 * Math.floor(Math.max(0.0, stopAgeSeconds))));
    }

    /** The per-client produce limit in bytes/s after a stop of {@code stopAgeSeconds} so far. */
    double limit(double stopAgeSeconds) {
        if (floor != null) {
            return floor;
        }
        return REFERENCE_REQUEST_BYTES / (muteSeconds(stopAgeSeconds) + measuredSeconds);
    }

    /** The limit a stop starts with, the largest: a shared limit at or below it is answered as a stop. */
    double enterLimit() {
        return limit(0.0);
    }
}
