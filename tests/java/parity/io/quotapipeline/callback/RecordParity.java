package io.quotapipeline.callback;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.HexFormat;

/**
 * Which of a file's decision record values the broker's callback takes: one hex-encoded value per line in, one line
 * out, {@code accept} or {@code refuse}, through the holder the callback uses (own cluster "c1", its clock at the
 * first argument). Compiled against the plugin's jar by tests/realkafka/test_reader_parity.py (the class shares the plugin's
 * package to reach its record rules).
 */
public final class RecordParity {
    private RecordParity() {
    }

    public static void main(String[] args) throws Exception {
        Instant now = Instant.parse(args[1]);
        StringBuilder out = new StringBuilder();
        for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
            DecisionHolder holder = new DecisionHolder("c1", Duration.ofMinutes(5), 1.0, Duration.ofSeconds(30),
                    java.time.Clock.fixed(now, java.time.ZoneOffset.UTC));
            holder.warnTo(warning -> { });
            DecisionHolder.Outcome outcome = holder.apply("c1".getBytes(StandardCharsets.UTF_8),
                    HexFormat.of().parseHex(line.strip()), "");
            out.append(outcome == DecisionHolder.Outcome.APPLIED ? "accept" : "refuse").append('\n');
        }
        System.out.print(out);
    }
}
